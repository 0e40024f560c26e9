package idem

import (
	"time"

	"github.com/idemgen/idemgen/idem/internal/link"
)

// The bridges of idem/internal/link: what the delivery engine in
// idem/idemimpl reaches of this package's unexported state.
func init() {
	link.OutboxBuffer = func(out any) *link.Buffer { return &out.(*Outbox).buf }
	link.MaintenanceTables = func(m any) *link.Tables { return &m.(*Maintenance).t }
	link.JanitorClock = func(now func() time.Time) any {
		return JanitorOption(func(o *janitorOptions) { o.now = now })
	}
	link.Attempt = func(msg any) (int, bool) {
		a, ok := msg.(attempter)
		if !ok {
			return 0, false
		}
		return a.deliveryAttempt(), true
	}
	link.InProgress = inProgress
	link.NewError = func(consumer, key string, err error, retryable bool) error {
		return &Error{Consumer: consumer, Key: key, Err: err, retryable: retryable}
	}
}
