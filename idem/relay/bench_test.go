package relay_test

import (
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/idemgen/idemgen/idem/idemtest"
	"github.com/idemgen/idemgen/idem/internal/relaytest"
	"github.com/idemgen/idemgen/idem/relay"
)

// BenchmarkRelay measures relay throughput with the recording publisher
// (which confirms at once): b.N rows committed beforehand, in transactions of
// 100, then the time until 1 or 4 relays have published and marked them all.
// It reports msgs/s.
func BenchmarkRelay(b *testing.B) {
	for _, relays := range []int{1, 4} {
		b.Run(fmt.Sprintf("relays=%d", relays), func(b *testing.B) {
			db := idemtest.New(b, relaytest.OutboxFS(b, nil))
			rows := relaytest.MakeRows("bench", b.N)
			for from := 0; from < len(rows); from += 100 {
				relaytest.Commit(b, db.Pool, rows[from:min(from+100, len(rows))])
			}
			rec := &relaytest.Recorder{}
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < relays; i++ {
				id := fmt.Sprintf("b%d", i)
				relaytest.Run(b, relay.New(db.Pool, rec.Publisher(id, 0, nil), relay.WithID(id),
					relay.WithLogger(slog.New(slog.DiscardHandler))))
			}
			for relaytest.Pending(b, db) > 0 {
				time.Sleep(time.Millisecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msgs/s")
		})
	}
}
