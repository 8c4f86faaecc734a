"""What the tests' Ray clusters start without, where ``ray.init`` would start them: the log
monitor on every node, which forwards workers' output to drivers that do not take it
(``log_to_driver=False``), and on the head the autoscaler's monitor and the dashboard. No test
asks for any of them (measured: a head node 1.0 CPU-s and 1 s less a start without the two
monitors)."""

# a node's arguments (``ray.cluster_utils.Cluster.add_node``), and the head's
QUIET_NODE = {"include_log_monitor": False}
QUIET_HEAD = {**QUIET_NODE, "include_dashboard": False, "no_monitor": True}
