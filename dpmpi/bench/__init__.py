"""dpmpi's bench suite: ``dpmpi-bench`` (dpmpi.bench.cli), one module per subcommand (repair,
restore, snapshot, e2e, overhead, chaos, watcher, scale), the cost model (model), the plots
(plots, matplotlib optional) and the Markdown report (report). The rank programs the jobs run are
``python -m dpmpi.bench.*_rank`` modules, the repository's examples/ and tests/programs/."""
