"""Loaded by every Python process of a test job whose PYTHONPATH names this folder (Spark's workers too).

The first attempt of write-stage task 0 fails right after its first file group's base file is written
(by a merge or by a bulk insert), so Spark retries the task (with ``spark.master = local[N,maxFailures]``)
while that file stays behind.
"""

import os

if os.environ.get("LAKETIDE_TEST_FAIL_FIRST_WRITE"):
    from laketide.writer.files import bucket_writer

    _finish = bucket_writer.BucketWriter.finish

    def _failing_finish(self):
        stat = _finish(self)
        from pyspark import TaskContext

        task = TaskContext.get()
        if task is not None and task.partitionId() == 0 and task.attemptNumber() == 0:
            raise RuntimeError(f"injected failure of task 0, attempt 0, after writing {stat.path}")
        return stat

    bucket_writer.BucketWriter.finish = _failing_finish
