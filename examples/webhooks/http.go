package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stripe/stripe-go/v82"
	"github.com/stripe/stripe-go/v82/webhook"

	"github.com/idemgen/idemgen/idem"
	"github.com/idemgen/idemgen/idem/idemhttp"
	"github.com/idemgen/idemgen/idem/rabbitmq"
)

// The service's HTTP paths. The refund API answers stripe-go's calls:
// /v2 paths send JSON, /v1 paths forms.
const (
	RefundsV2Path = "/v2/refunds"
	RefundsV1Path = "/v1/refunds"
	WebhookPath   = "/webhooks/stripe"
)

// Routes returns the service's HTTP API on pool: the refund API at
// RefundsV2Path and RefundsV1Path, and Stripe's webhook at WebhookPath.
// opts go to both wrappers' constructors. A process that also consumes the
// events from a queue (ConsumeEvents) gives it a RecordEventIdem of
// its own: wrappers of one consumer share its inbox, whichever way the
// events come.
func (s *Service) Routes(pool *pgxpool.Pool, opts ...idem.Option) http.Handler {
	mux := http.NewServeMux()
	refunds := s.RefundHandler(NewCreateRefundIdem(pool, s, opts...))
	mux.Handle(RefundsV2Path, refunds)
	mux.Handle(RefundsV1Path, refunds)
	mux.Handle(WebhookPath, s.WebhookHandler(NewRecordEventIdem(pool, s, opts...)))
	return mux
}

// RefundHandler serves the refund API through w: JSON or form bodies, the
// Idempotency-Key header, and the client from the bearer API key (401
// without a known one). opts are added to the endpoint's own.
func (s *Service) RefundHandler(w *CreateRefundIdem, opts ...idemhttp.Option) http.Handler {
	h := idemhttp.Handler(w, append([]idemhttp.Option{
		idemhttp.WithClient(s.clientOf),
		idemhttp.WithDecoder(DecodeRefundForm),
		idemhttp.WithErrorStatus(StatusOf),
	}, opts...)...)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if s.clientOf(r) == "" {
			rw.Header().Set("WWW-Authenticate", "Bearer")
			idemhttp.WriteProblem(rw, r, idemhttp.Problem{Type: "about:blank", Title: "Unauthorized", Status: http.StatusUnauthorized})
			return
		}
		h.ServeHTTP(rw, r)
	})
}

// WebhookHandler serves Stripe's webhook through w: VerifyStripe checks each
// request's signature before its event reaches the wrapper, and the event's
// own id is its key, so Stripe's retries need no key header.
func (s *Service) WebhookHandler(w *RecordEventIdem) http.Handler {
	return idemhttp.Handler(w, idemhttp.WithDecoder(VerifyStripe(s.WebhookSecret)))
}

// ConsumeEvents feeds h the Stripe events of a RabbitMQ queue until ctx
// ends: events that an event destination or a replay tool forwards there.
// h is a RecordEventIdem (the webhook's, or another of the same consumer),
// or a decorator of one: an event that also came by webhook is then a
// duplicate, whichever came first.
func ConsumeEvents(ctx context.Context, url string, top rabbitmq.Topology, h idem.Handler[stripe.Event], opts ...rabbitmq.Option) error {
	return rabbitmq.Consume(ctx, url, top, h, opts...)
}

// clientOf is the client id of the request's bearer API key, "" for none.
func (s *Service) clientOf(r *http.Request) string {
	key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return ""
	}
	return s.APIKeys[key]
}

// StatusOf is the refund API's WithErrorStatus: a payment it does not
// know is 404, a refund it cannot make 400; any other failure stays 500.
func StatusOf(err error) (int, bool) {
	switch {
	case errors.Is(err, ErrUnknownPayment):
		return http.StatusNotFound, true
	case errors.Is(err, ErrRefundTooLarge), errors.Is(err, ErrInvalidAmount):
		return http.StatusBadRequest, true
	}
	return 0, false
}

// DecodeRefundForm decodes an application/x-www-form-urlencoded body (what
// stripe-go sends to /v1 paths) into RefundParams; it declines other
// content types.
func DecodeRefundForm(r *http.Request, v any) error {
	if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "application/x-www-form-urlencoded" {
		return idemhttp.ErrUnsupportedMediaType
	}
	p, ok := v.(*RefundParams)
	if !ok {
		return fmt.Errorf("webhooks: a refund form does not decode into %T", v)
	}
	if err := r.ParseForm(); err != nil {
		return err
	}
	amount, err := strconv.ParseInt(r.PostForm.Get("amount"), 10, 64)
	if err != nil {
		return fmt.Errorf("amount: %w", err)
	}
	p.Payment, p.Amount = r.PostForm.Get("payment"), amount
	return nil
}

// VerifyStripe returns the webhook's decoder: it checks the body against
// the Stripe-Signature header with the endpoint's signing secret (and the
// signature's age), then decodes the event. A request that fails the check
// is 400 and reaches no handler; it never declines a content type, so that
// no other decoder sees an unverified body.
func VerifyStripe(secret string) idemhttp.Decoder {
	return func(r *http.Request, v any) error {
		ev, ok := v.(*stripe.Event)
		if !ok {
			return fmt.Errorf("webhooks: a Stripe event does not decode into %T", v)
		}
		payload, err := io.ReadAll(r.Body)
		if err != nil {
			return err
		}
		*ev, err = webhook.ConstructEvent(payload, r.Header.Get("Stripe-Signature"), secret)
		return err
	}
}

// StripeError writes error responses as Stripe's API does, {"error":
// {"type", "message"}}: with it as WithErrorWriter, stripe-go gives up on a
// 4xx at once, where it retries a body it cannot read as a Stripe error.
func StripeError(w http.ResponseWriter, _ *http.Request, p idemhttp.Problem) {
	typ := "invalid_request_error"
	switch p.Type {
	case idemhttp.ProblemKeyReused, idemhttp.ProblemInProgress:
		typ = "idempotency_error"
	case idemhttp.ProblemFailed:
		if p.Status >= 500 {
			typ = "api_error"
		}
	}
	body, _ := json.Marshal(map[string]map[string]string{"error": {"type": typ, "message": p.Detail}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(body, '\n'))
}
