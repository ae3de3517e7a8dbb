"""phasefit's Prometheus rules: one Python source (``rules_source``) rendered to rule files and a
PrometheusRule, promtool unit tests in ``alerts/tests``, an Alertmanager example, and a loopback harness
(``testing``) that runs real Prometheus and Alertmanager for end-to-end tests. See ``alerts/README.md``."""
