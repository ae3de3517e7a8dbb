"""Pools, their workload and capacity, and the best placement of their workers."""
