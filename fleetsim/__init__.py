"""The simulated fleet: a collector source that emits the data contract's records for a heterogeneous GPU
fleet over simulated time, with ground truth obtained by re-simulation.

The analyzer must never import this package: the simulator is the analyzer's examiner, not its teacher.

Modules: ``traffic`` (arrivals and Azure-fitted lengths), ``physics`` (step times per SKU), ``pool``
(routing, queues, operating points), ``counters`` (DCGM-definition counters), ``life`` (drift, restarts,
collector gaps, Xid 79, idle periods), ``scenario`` (YAML), ``layout`` (nodes, GPUs, workers),
``fleet_sim`` (the vectorised engine), ``records`` (columns to JSON lines / records), ``truth`` and
``placement`` (ground truth), ``role_changes`` and ``truth_changes`` (scheduled role changes: advice
carried out, and what each realized), ``planted`` (findings a scenario plants by construction), ``examine``
(scoring the analyzer against the truth by counts), ``naming`` (node and worker naming styles),
``source`` (the streaming API), ``calibration`` (the published tables).

What the records say (per window):

- ``gpu_sample``: ``source`` "dcgm" (its counters follow DCGM's definitions), ``gpu_name`` as NVML reports
  it ("NVIDIA H100 80GB HBM3", "NVIDIA H200"), DCGM-definition
  ``sm_active``/``tensor_active``/``dram_active`` (0..1, DRAM capped at 0.8), ``gpu_util``,
  ``mem_used_bytes`` (vLLM preallocates: HBM x gpu_memory_utilization while the engine runs, the weights
  being loaded while it restarts), ``power_w``, NVLink bytes (tensor-parallel all-reduces) and PCIe bytes
  (the KV handoff: sent by prefill GPUs, received by decode GPUs). ``sm_clock_mhz`` is not simulated
  (null). A GPU lost to Xid 79 reports ``state`` "lost" and nulls.
- ``engine_sample``: ``engine`` "vllm" or "sglang", ``role_source`` "sim", the served model id
  (an HF id), ``precision``. ``prompt_tokens`` counts every prompt token of the requests the engine took
  in the window; on a decode worker that is the prompt tokens whose KV it received (vLLM counts them,
  vLLM #33289), so count decode throughput by ``generation_tokens``. A prefill worker's
  ``generation_tokens`` is one per request it prefilled (it returns the first token). Latency quantiles:
  prefill workers report TTFT (queue + prefill) and no TPOT; decode workers their own TTFT view
  (admission wait + KV transfer + one step) and TPOT; colocated ("mixed") workers both. A quantile is
  null in a window where the engine served nothing. ``ttft_histogram``/``tpot_histogram``/``e2e_histogram``
  are the window's histograms behind them (``latency_histograms``: the same lognormal, on the shared grid
  of ``fleet.histograms``, pinned at the reported p90; counting requests for TTFT and end to end, output
  tokens for TPOT): null where the role reports no such quantile, empty (count 0) where it served nothing.
  ``requests_running`` is the decode batch (prompts in flight on a prefill worker), ``kv_cache_usage``
  the KV pool's fill, ``preemptions`` the sequences evicted when the KV cache runs out.
  ``kv_capacity_tokens`` is the KV cache the worker holds, as vLLM's
  ``cache_config_info`` and SGLang's ``max_total_num_tokens`` report it: the budget the simulator's
  physics gives the worker and caps its batch with (``records.kv_capacity_tokens``). ``max_running_requests``
  is the engine's concurrency cap (vLLM's ``max_num_seqs``, SGLang's ``max_running_requests``): the cap
  the physics runs its engine with, the scenario's ``max_batch`` or the perturbed draw
  (``records.max_running_requests``).
- Restarting engines send no engine sample (their GPUs report idle); a collector gap silences a whole
  node (no GPU or engine samples). A scheduled role change restarts the engine, which then reports its
  new ``role`` under the same ``worker_id`` (an id that may name the role it started with); one made
  with ``replace_pods`` (the Kubernetes Deployment way) instead deletes the pod and starts a new one on
  the same GPUs, whose engine and GPU samples carry a new ``worker_id`` named for the new role.
- Both carry the pool's ``cluster`` (when the scenario names one) and engine samples its ``deployment``.
  A node group with ``telemetry: basic`` reports ``source`` "dcgm" with null profiling ratios (dcgm-exporter's
  default fields), a degraded GPU ``state`` "degraded", and MIG slices ``parent_gpu_uuid``/``mig_profile``.
  Node names and worker ids follow the scenario's ``naming`` (``nodeNN`` by default; eks, gke, fqdn).
"""
