package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/idemgen/idemgen/internal/pgcluster"
)

// database is the soak's own PostgreSQL: one throwaway cluster, or, with
// -failover, a primary and a synchronous standby (pgcluster.Pair) that the
// soak fails over. It never touches the machine's shared server.
type database struct {
	single *pgcluster.Cluster
	pair   *pgcluster.Pair
}

// startDatabase starts the soak's PostgreSQL, with fsync off: it is thrown
// away. A single cluster commits with synchronous_commit off too, as
// nothing else keeps its commits. A pair keeps it on, with synchronous
// replication: a commit returns once the standby has flushed it, so a
// failover loses no acknowledged commit.
func startDatabase(failover bool) (*database, error) {
	settings := []string{"fsync=off", "max_connections=400", "shared_buffers=256MB"}
	if !failover {
		c, err := pgcluster.Start("idemgen-soak-pg.", append(settings, "synchronous_commit=off")...)
		return &database{single: c}, err
	}
	p, err := pgcluster.StartPair(pgcluster.PairOptions{Prefix: "idemgen-soak-pg.", Sync: true, Settings: settings})
	return &database{pair: p}, err
}

// URL is what the soak and its children connect to: the cluster, or the
// pair's multi-host URL (target_session_attrs=read-write).
func (d *database) URL() string {
	if d.pair != nil {
		return d.pair.URL("postgres")
	}
	return d.single.URL("postgres")
}

// primary is the cluster that takes writes now.
func (d *database) primary() *pgcluster.Cluster {
	if d.pair != nil {
		return d.pair.Primary()
	}
	return d.single
}

// describe says what the database is, for the soak's log.
func (d *database) describe() string {
	if d.pair != nil {
		return fmt.Sprintf("a throwaway primary (%s) and its synchronous standby (%s), reached at %s",
			d.pair.Primary(), d.pair.Standby(), d.pair.URL("postgres"))
	}
	return fmt.Sprintf("a throwaway cluster (%s) in %s", d.single.Bin, d.single.Dir)
}

func (d *database) remove() {
	if d.pair != nil {
		d.pair.Remove()
		return
	}
	d.single.Remove()
}

// failoverRecord is one failover of the run: how long the flow took to
// commit again, and how long the new standby took to build.
type failoverRecord struct {
	from, to int
	// resume is from the primary's stop to the first charge committed on
	// the new primary; 0 when no order was left to charge.
	resume  time.Duration
	rebuild time.Duration
}

// failover fails the pair over, waits for the first charge committed on
// the new primary (the consumers found it) unless done says no order is
// left to charge, and makes a new standby.
func (d *database) failover(ctx context.Context, done func() bool) (failoverRecord, error) {
	f, err := d.pair.Failover()
	if err != nil {
		return failoverRecord{}, err
	}
	r := failoverRecord{from: f.From, to: f.To}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		// The old primary's last commits are before Dead.
		at, ok, err := d.pair.FirstCommitAfter(ctx, "postgres", pgx.Identifier{"charges"}, f.Dead)
		if err == nil && ok {
			r.resume = at.Sub(f.Stopped)
			break
		}
		if err == nil && done() {
			break
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return r, fmt.Errorf("no charge committed on the new primary within 2 minutes of the failover (last error: %v)", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	began := time.Now()
	if err := d.pair.Rebuild(); err != nil {
		return r, err
	}
	r.rebuild = time.Since(began)
	return r, nil
}

// resumed says when the flow committed again after the failover.
func (r failoverRecord) resumed() string {
	if r.resume == 0 {
		return "no order was left to charge"
	}
	return fmt.Sprintf("the first charge on the new primary %v after the primary's stop", r.resume.Round(time.Millisecond))
}
