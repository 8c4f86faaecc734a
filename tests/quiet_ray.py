"""What the tests' Ray clusters start without: the autoscaler's monitor, and the log monitor,
which forwards workers' output to drivers that do not take it (``log_to_driver=False``). No test
asks for either; each costs about 0.5 CPU-s a start (measured: a head node 1.0 CPU-s and 1 s
less with both off)."""

# a head node's arguments (``ray.cluster_utils.Cluster``); other nodes: include_log_monitor=False
QUIET_HEAD = {"include_dashboard": False, "include_log_monitor": False, "no_monitor": True}
