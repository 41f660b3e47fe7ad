"""What runqueue tells the outside about itself: the worker's Prometheus
counters (``metrics``), the web side's queue gauges (``queue_metrics``), the
OpenTelemetry spans (``tracing``), the JSON log format (``logfmt``) and the
one place the worker calls them from (``observe``). Nothing here writes a
run: these modules read and report."""
