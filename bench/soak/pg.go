package main

import "github.com/idemgen/idemgen/internal/pgcluster"

// startCluster starts the soak's own PostgreSQL, a throwaway cluster it may
// stop and start (pgcluster), with fsync off: it is thrown away. It never
// touches the machine's shared server.
func startCluster() (*pgcluster.Cluster, error) {
	return pgcluster.Start("idemgen-soak-pg.", "fsync=off", "synchronous_commit=off",
		"max_connections=400", "shared_buffers=256MB")
}
