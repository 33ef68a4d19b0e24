"""Coordination: the instant lifecycle of a table and the lease that makes one writer its owner."""

from laketide.coordinator.lease import Lease, LeaseError, LeaseHeld, LeaseHolder, LeaseLost, LocalLease
from laketide.coordinator.lifecycle import Coordinator
from laketide.coordinator.retry import RetryPolicy
from laketide.coordinator.rollback import RollbackRefused, RollbackResult
from laketide.coordinator.zookeeper_lease import ZooKeeperLease

__all__ = [
    "Coordinator",
    "Lease",
    "LeaseError",
    "LeaseHeld",
    "LeaseHolder",
    "LeaseLost",
    "LocalLease",
    "RetryPolicy",
    "RollbackRefused",
    "RollbackResult",
    "ZooKeeperLease",
]
