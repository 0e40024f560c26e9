package idemimpl

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"testing"
	"time"
)

type fpInner struct {
	SKU string `json:"sku"`
	Qty int    `json:"qty"`
}

type fpBase struct {
	Source string `json:"source"`
}

type fpOld struct {
	fpBase
	ID      string            `json:"id"`
	Amount  int64             `json:"amount"`
	Lines   []fpInner         `json:"lines"`
	Attrs   map[string]string `json:"attrs"`
	Skipped string            `json:"-"`
	hidden  int
}

// fpNew is fpOld after a deploy: fields added (at every depth), and one
// moved out of the embedded struct, which encoding/json flattens anyway.
type fpNew struct {
	Source  string            `json:"source"`
	ID      string            `json:"id"`
	Amount  int32             `json:"amount"` // narrowed: the number is the same
	Lines   []fpLineNew       `json:"lines"`
	Attrs   map[string]string `json:"attrs"`
	Note    string            `json:"note"`
	At      time.Time         `json:"at"`
	Ptr     *int              `json:"ptr"`
	Nested  fpInner           `json:"nested"`
	Skipped string            `json:"-"`
}

type fpLineNew struct {
	SKU   string  `json:"sku"`
	Qty   float64 `json:"qty"`
	Promo string  `json:"promo"`
}

func mustFP(t *testing.T, msg any) []byte {
	t.Helper()
	fp, err := fingerprint(msg)
	if err != nil {
		t.Fatal(err)
	}
	if len(fp) != fingerprintLen || fp[0] != fingerprintV1 {
		t.Fatalf("fingerprint %x: want %d bytes, scheme %d first", fp, fingerprintLen, fingerprintV1)
	}
	return fp
}

func TestCanonicalFingerprintIgnoresAddedZeroFields(t *testing.T) {
	old := fpOld{fpBase: fpBase{Source: "s"}, ID: "a", Amount: 5, Lines: []fpInner{{SKU: "x", Qty: 2}}, Attrs: map[string]string{"b": "2", "a": "1"}, Skipped: "p", hidden: 3}
	grown := fpNew{Source: "s", ID: "a", Amount: 5, Lines: []fpLineNew{{SKU: "x", Qty: 2}}, Attrs: map[string]string{"a": "1", "b": "2"}, Skipped: "q"}
	if a, b := mustFP(t, old), mustFP(t, grown); !bytes.Equal(a, b) {
		t.Errorf("a type with added zero fields changed the fingerprint: %x != %x", a, b)
	}
	if a, b := mustFP(t, old), mustFP(t, &old); !bytes.Equal(a, b) {
		t.Errorf("a pointer to the message changed the fingerprint")
	}
	one := 1
	for name, changed := range map[string]fpNew{
		"a field set":         {Source: "s", ID: "a", Amount: 5, Lines: grown.Lines, Attrs: grown.Attrs, Note: "n"},
		"a nested field set":  {Source: "s", ID: "a", Amount: 5, Lines: []fpLineNew{{SKU: "x", Qty: 2, Promo: "p"}}, Attrs: grown.Attrs},
		"a value changed":     {Source: "s", ID: "a", Amount: 6, Lines: grown.Lines, Attrs: grown.Attrs},
		"a map entry changed": {Source: "s", ID: "a", Amount: 5, Lines: grown.Lines, Attrs: map[string]string{"a": "1", "b": "3"}},
		"a pointer set":       {Source: "s", ID: "a", Amount: 5, Lines: grown.Lines, Attrs: grown.Attrs, Ptr: &one},
		"a time set":          {Source: "s", ID: "a", Amount: 5, Lines: grown.Lines, Attrs: grown.Attrs, At: time.Unix(1, 0)},
	} {
		if bytes.Equal(mustFP(t, old), mustFP(t, changed)) {
			t.Errorf("%s: same fingerprint as the original", name)
		}
	}
	// Strings cannot run into each other.
	type pair struct{ A, B string }
	if bytes.Equal(mustFP(t, pair{"ab", "c"}), mustFP(t, pair{"a", "bc"})) {
		t.Error("two different pairs of strings share a fingerprint")
	}
}

// BenchmarkFingerprint measures the canonical scheme against json.Marshal and
// SHA-256 (what a hand-written inbox would hash) side by side, on a typical
// message.
func BenchmarkFingerprint(b *testing.B) {
	type line struct {
		SKU   string  `json:"sku"`
		Qty   int     `json:"qty"`
		Price float64 `json:"price"`
	}
	type order struct {
		OrderID    string            `json:"order_id"`
		Customer   string            `json:"customer"`
		AmountCent int64             `json:"amount_cents"`
		Currency   string            `json:"currency"`
		Lines      []line            `json:"lines"`
		Labels     map[string]string `json:"labels"`
		PlacedAt   time.Time         `json:"placed_at"`
		Note       string            `json:"note"`
	}
	msg := order{
		OrderID: "ord-20261129-000042", Customer: "cust-7", AmountCent: 129900, Currency: "EUR",
		Lines:    []line{{"sku-1", 2, 19.99}, {"sku-2", 1, 90.01}},
		Labels:   map[string]string{"channel": "web", "region": "eu"},
		PlacedAt: time.Date(2026, 11, 29, 14, 21, 0, 0, time.UTC),
	}
	b.Run("json", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := json.Marshal(msg)
			if err != nil {
				b.Fatal(err)
			}
			sum := sha256.Sum256(data)
			_ = sum[:]
		}
	})
	b.Run("canonical", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fingerprint(msg); err != nil {
				b.Fatal(err)
			}
		}
	})
	type small struct {
		MessageID string `json:"message_id"`
		Account   int64  `json:"account"`
		Amount    int64  `json:"amount"`
	}
	s := small{MessageID: "m-000000042", Account: 42, Amount: -7}
	b.Run("json/small", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, _ := json.Marshal(s)
			sum := sha256.Sum256(data)
			_ = sum[:]
		}
	})
	b.Run("canonical/small", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := fingerprint(s); err != nil {
				b.Fatal(err)
			}
		}
	})
}
