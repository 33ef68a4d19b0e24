"""The file spark-submit runs: the ``laketide`` command line, inside the session spark-submit made."""

from laketide.cli import main

if __name__ == "__main__":
    main()
