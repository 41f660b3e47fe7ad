"""Real PostgreSQL topologies for the tests, the chaos soak and the bench:
a primary with a streaming standby of the machine's PostgreSQL, and a
PgBouncer in front of a server. Never part of the installed package."""
