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
    settings = config.coordinator
    listening = None
    if settings.api_port is not None:
        from laketide.api.server import bind

        listening = bind(settings.api_host, settings.api_port)  # a port in use stops the job before Spark starts

    def ready(job) -> None:
        if listening is not None:
            from laketide.api.app import ApiLimits, ViewSettings, create_app, create_database_app
            from laketide.api.guard import default_hosts
            from laketide.api.server import ApiServer
            from laketide.writer.job.session import quarantine_path

            token = settings.api_token or os.environ.get(TOKEN_ENV)
            limits = ApiLimits(settings.api_max_rate or None, settings.api_max_concurrent, settings.api_max_body)
            hosts = (
                tuple(settings.api_allowed_hosts)
                if settings.api_allowed_hosts is not None
                else default_hosts(settings.api_host)
            )
            if hasattr(job, "tables"):  # a job of a whole database: each table's views are its own job's

                def views_of(table):
                    return ViewSettings(
                        quarantine_path(table.job.config), config.storage.io_options, config.write.small_file_limit
                    )

                app = create_database_app(job, token, views_of, limits, hosts)
            else:
                views = ViewSettings(quarantine_path(config), config.storage.io_options, config.write.small_file_limit)
                app = create_app(job.table, token, job=job, settings=views, limits=limits, allowed_hosts=hosts)
            server = ApiServer(app, settings.api_host, sock=listening).start()
            servers.append(server)
            if hasattr(job, "tables"):
                job.api_address = server.address
            else:
                job.coordinator.lease.announce(server.address)
            log.info(
                "coordinator API on %s (OpenAPI at %s/docs, dashboard at %s/ui)",
                server.address,
                server.address,
                server.address,
            )
        if on_ready is not None:
            on_ready(job)

    try:
        return run(config, on_step=on_step, on_ready=ready)
    finally:
        for server in servers:
            server.stop()
        if listening is not None:
            listening.close()
