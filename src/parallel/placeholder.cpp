// Parallel layer sources.
