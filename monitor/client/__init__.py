"""The logging client: `Monitor(run).log(step, metrics)` from any trainer, in microseconds.

One behaviour a module: the checks at the door (`log_checks`), taking values as they are at the
call (`log_values`, `device_copy`), the writer's columns (`metric_columns`), the store operation it
can leave behind (`store_jobs`), the spool (`spool`), how an outage is told (`outage`), and the
`Monitor` that ties them together (`monitor`).
"""

from monitor.client.log_checks import InvalidLogError
from monitor.client.monitor import Monitor, MonitorSettings, NullMonitor

__all__ = ["InvalidLogError", "Monitor", "MonitorSettings", "NullMonitor"]
