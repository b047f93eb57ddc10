"""The logging client: `Monitor(run).log(step, metrics)` from any trainer, in microseconds.

One behaviour a module: what `log()` does on the caller's thread (`log_call`, with `device_copy`
for CUDA tensors), the writer's columns (`metric_columns`), the store operation it
can leave behind (`store_jobs`), the spool (`spool`), how an outage is told (`outage`), and the
`Monitor` that ties them together (`monitor`).
"""

from monitor.client.log_call import InvalidLogError
from monitor.client.monitor import Monitor, MonitorSettings, NullMonitor

__all__ = ["InvalidLogError", "Monitor", "MonitorSettings", "NullMonitor"]
