"""The weekly placement audit report: built from the store, rendered to self-contained HTML and Markdown.

:mod:`~analyzer.report.build` computes it, :mod:`~analyzer.report.document` words it and
:mod:`~analyzer.report.publish` renders and stores it. The modules: docs/analyzer.md#the-report
"""
