"""The documentation: a README a newcomer reads in minutes, a site that builds strictly (no broken link, no page
left out of the navigation), and a configuration reference made from the configuration model."""

import os
import re
import subprocess
import sys

from fixture_tables import REPO

from laketide.config import load_config
from laketide.config.reference import reference_markdown, sections

ROOT = REPO
README = ROOT / "README.md"


def test_the_readme_is_short_and_its_links_lead_somewhere():
    text = README.read_text()
    assert len(text.splitlines()) <= 300
    targets = re.findall(r"\]\(((?!https?://|#)[^)#]+)", text)
    assert targets, "the README links to the documentation"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, missing


def test_the_readme_job_is_a_valid_configuration(tmp_path):
    """The one job the README shows loads as it is, as `laketide run --config` loads it."""
    block = re.search(r"## One job\n\n```toml\n(.*?)```", README.read_text(), re.S)
    assert block, "the README shows one job's configuration"
    (tmp_path / "job.toml").write_text(block[1])
    config = load_config(tmp_path / "job.toml")
    assert config.source.envelope == "debezium" and config.table.record_key == ["order_id"]


def test_every_configuration_key_is_in_the_reference():
    """A key without a description fails ``sections()``; every key the model has is in the reference."""
    keys = [k.name for s in sections() for k in s.keys]
    reference = reference_markdown()
    assert {
        "table.path",
        "source.kafka.max_offsets_per_trigger",
        "write.driver_batch_bytes",
        "compaction.max_log_bytes",
        "tables.<name>.schema",
        "database.on_table_failure",
        "storage.max_in_flight",
    } <= set(keys)
    assert all(f"`{k}`" in reference for k in keys)
    assert len(keys) == len(set(keys))


def test_sizes_and_choices_read_as_a_user_writes_them():
    by_name = {k.name: k for s in sections() for k in s.keys}
    assert by_name["write.target_file_size"].type == "size" and by_name["write.target_file_size"].default == '`"128MB"`'
    assert by_name["table.type"].type == '`"COPY_ON_WRITE"` \\| `"MERGE_ON_READ"`'
    assert by_name["table.path"].default == "required"
    assert by_name["coordinator.api_port"].default == "unset"


def test_the_site_builds_strictly_with_the_reference_in_it(tmp_path):
    """``mkdocs build --strict``: a broken link or anchor, a page outside the navigation or a hook's failure
    fails it. The built configuration page holds the reference the model makes."""
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert done.returncode == 0, done.stderr[-3000:]
    page = (tmp_path / "site" / "configuration" / "index.html").read_text()
    assert "write.driver_batch_bytes" in page and "source.debezium.timestamp_unit" in page
