//! Workloads for tailctl experiments.
