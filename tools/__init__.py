"""What is not the app: the benchmark, the chaos soak and the PostgreSQL topologies
the tests, the soak and the benchmark start."""
