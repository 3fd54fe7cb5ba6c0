"""Multi-rank analysis: the ranks of one job read together, one module per concept.

- communication: which GPU work of one device moves data between ranks, and how much of it runs beside compute;
- rank_digest: what the job needs of one rank's trace (``RankDigest``), small enough to come back from a worker;
- process_groups: collectives matched within each process group, the waits, the rank each group waits for;
- p2p_pairs: every send paired with its recv;
- pipeline: stages, microbatches, bubble and bottleneck of a pipeline-parallel job;
- straggler: whether the rank a group waits for leads because of the job or maybe because of the profiler;
- ranks: the job itself (``analyze_job``): the above put together, with the ranks' clocks.

The job's Report (its verdict and the job rules' findings) is tracelint.trace.job_summary, a layer above: verdicts
and rules read this package. Nothing is imported here: the single-trace analysis reads ``communication`` without
loading the rest.
"""
