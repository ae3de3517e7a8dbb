"""What the exporters and serving engines call things, written once for the collector and zero-agent mode.

- :mod:`fleet.vocabulary.roles`: the words that name a phase role (label values, engine modes).
- :mod:`fleet.vocabulary.engines`: each engine's metric names per engine_sample field, with kind and unit.
- :mod:`fleet.vocabulary.dcgm`: dcgm-exporter's field names per gpu_sample field, with units, and the labels
  that identify a GPU or MIG instance.
- :mod:`fleet.labels`: the label names (deployment, role, Dynamo and SGLang metric labels).

The collector parses ``/metrics`` text with these tables and zero-agent mode builds its PromQL from them, so
a name added here reaches both; tests/fleet/test_vocabulary.py checks the tables against the real captures
in tests/fixtures/metrics and against both readers.
"""
