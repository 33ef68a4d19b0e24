"""The file spark-submit runs from a checkout (``deploy/spark-submit.sh``): the ``laketide`` command line,
inside the session spark-submit made. An installed wheel carries the same as ``laketide/__main__.py``."""

import runpy

if __name__ == "__main__":
    runpy.run_module("laketide", run_name="__main__", alter_sys=True)
