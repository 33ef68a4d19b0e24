"""The coordinator service: the streaming job with its REST API served in-process."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable

from laketide.config import JobConfig

TOKEN_ENV = "LAKETIDE_API_TOKEN"
log = logging.getLogger("laketide.job")


def run_service(config: JobConfig, on_ready: Callable | None = None, on_step: Callable[[str, int], None] | None = None):
    """Run the job; when ``coordinator.api_port`` is set, serve the API while it runs and name it in the lease."""
    from laketide.spark.job import run

    servers = []

    def ready(job) -> None:
        settings = config.coordinator
        if settings.api_port is not None:
            from laketide.api.app import ApiLimits, ViewSettings, create_app
            from laketide.api.server import ApiServer
            from laketide.writer.running import quarantine_path

            token = settings.api_token or os.environ.get(TOKEN_ENV)
            limits = ApiLimits(settings.api_max_rate or None, settings.api_max_concurrent, settings.api_max_body)
            views = ViewSettings(quarantine_path(config), config.storage.io_options, config.write.small_file_limit)
            server = ApiServer(create_app(job.table, token, job=job, settings=views, limits=limits), settings.api_host, settings.api_port).start()
            servers.append(server)
            job.coordinator.lease.announce(server.address)
            log.info("coordinator API on %s (OpenAPI at %s/docs, dashboard at %s/ui)", server.address, server.address, server.address)
        if on_ready is not None:
            on_ready(job)

    try:
        return run(config, on_step=on_step, on_ready=ready)
    finally:
        for server in servers:
            server.stop()
