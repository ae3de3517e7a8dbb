"""The weekly placement audit report: built from the store, rendered to self-contained HTML and Markdown.

- :mod:`analyzer.report.build`: the week's figures from the store (the analyzer re-run over the week and the
  week before, inventory, data quality via :mod:`~analyzer.report.coverage`, sections via
  :mod:`~analyzer.report.sections`) as an :class:`~analyzer.report.model.AuditReport`;
- :mod:`analyzer.report.document` and :mod:`analyzer.report.parts`: the wording and tables, as
  :mod:`~analyzer.report.blocks`; :mod:`analyzer.report.figures`: the charts (matplotlib, PNG);
- :mod:`analyzer.report.html`, :mod:`analyzer.report.markdown`: the renderings;
  :mod:`analyzer.report.publish`: rendering, storing by ISO week, writing files;
- :mod:`analyzer.report.fleet_roofline`: the counter-derived roofline points the report and the dashboard
  both draw; :mod:`analyzer.report.style`: colours and number formats they share.
"""
