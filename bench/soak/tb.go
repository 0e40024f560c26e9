package main

import (
	"fmt"
	"os"
	"testing"
)

// tb lets the soak, which is no test, call idem/idemtest/brokertest's
// helpers (how the tests find RabbitMQ and NATS, including their throwaway
// servers, and close RabbitMQ connections from the server side): a helper's
// t.Fatalf becomes a panic that tbCall turns back into an error. Only the
// methods those helpers call are implemented.
type tb struct {
	testing.TB
	name string
}

type tbFatal struct{ msg string }

func (t tb) Helper()                         {}
func (t tb) Name() string                    { return t.name }
func (t tb) Logf(format string, args ...any) { fmt.Fprintf(os.Stderr, format+"\n", args...) }
func (t tb) Fatalf(format string, args ...any) {
	panic(tbFatal{fmt.Sprintf(format, args...)})
}
func (t tb) Fatal(args ...any) { panic(tbFatal{fmt.Sprint(args...)}) }

// tbCall runs f with a tb named name and returns a helper's failure as an
// error.
func tbCall(name string, f func(testing.TB)) (err error) {
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(tbFatal); ok {
				err = fmt.Errorf("%s", f.msg)
				return
			}
			panic(r)
		}
	}()
	f(tb{name: name})
	return nil
}
