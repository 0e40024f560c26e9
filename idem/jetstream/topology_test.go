package jetstream_test

import (
	"context"
	"strings"
	"testing"
	"time"

	idemjs "github.com/idemgen/idemgen/idem/jetstream"
)

// TestDeclareReplicas: Declare gives both streams Topology.Replicas, and
// refuses a count JetStream does not take before it asks the server. (A
// stream of 3 replicas on a cluster: examples/flow's cluster test.)
func TestDeclareReplicas(t *testing.T) {
	url := natsURL(t)
	top := topology(t)
	top.Replicas = 1
	declare(t, url, top)
	_, js := connect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, name := range []string{top.Stream, top.DeadLetterStreamName()} {
		s, err := js.Stream(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if r := s.CachedInfo().Config.Replicas; r != 1 {
			t.Errorf("stream %s: %d replicas, want 1", name, r)
		}
	}
	for _, n := range []int{-1, 6} {
		bad := topology(t)
		bad.Replicas = n
		err := idemjs.Declare(ctx, js, bad)
		if err == nil || !strings.Contains(err.Error(), "Topology.Replicas of "+bad.Stream) {
			t.Errorf("Replicas %d: %v; want the refusal naming it", n, err)
		}
	}
}
