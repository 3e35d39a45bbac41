"""What the server wraps around endpoints: access log, admission, health, metrics, loop lag, blocked loop."""

from .accesslog import AccessLog
from .admission import Admission
from .blocking import BlockedLoopDetector
from .health import HealthProbes
from .lag import LoopLagMonitor
from .logformat import JSONLogFormatter
from .metrics import Metrics, prepare_multiprocess_dir, prometheus_available, worker_exited

__all__ = [
    "AccessLog",
    "Admission",
    "BlockedLoopDetector",
    "HealthProbes",
    "JSONLogFormatter",
    "LoopLagMonitor",
    "Metrics",
    "prepare_multiprocess_dir",
    "prometheus_available",
    "worker_exited",
]
