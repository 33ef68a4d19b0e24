"""``python -m laketide``: the ``laketide`` command line.

spark-submit takes this file as its application too (``spark-submit ... <site-packages>/laketide/__main__.py
run --config job.toml``): the job then runs in the session spark-submit made.
"""

from laketide.cli import main

if __name__ == "__main__":
    main()
