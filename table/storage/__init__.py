"""The storage seam: ``FileIO`` chosen by a URI's scheme (local disks and NFS, S3, Azure Blob, GCS), an object
store's files, and its requests counted, bounded and retried. Imports nothing of laketide but its errors."""
