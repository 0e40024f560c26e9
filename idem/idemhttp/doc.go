// Package idemhttp serves idem handlers over HTTP: [Handler] turns a
// generated wrapper into an http.Handler that gives an API client or a
// webhook sender the guarantee a broker's consumer gets. A request is
// processed at most once per key, and every retry of it gets the first
// response again, marked Idempotent-Replayed: true, as Stripe's API does.
//
// A handler takes an [idem.Request] to key on the request's
// Idempotency-Key header and on the client that sent it,
//
//	//idem:handler consumer=shop.refund key=Client,Key
//	func (s *Service) Refund(ctx context.Context, tx pgx.Tx, req idem.Request[RefundParams]) (Refund, error)
//
//	mux.Handle("POST /v2/refunds", idemhttp.Handler(shop.NewRefundIdem(pool, svc), idemhttp.WithClient(accountOf)))
//
// or the body type itself when the body carries its own id (a webhook
// event, key=ID), and then needs no key header. The statuses follow the
// IETF draft "The Idempotency-Key HTTP Header Field": 400 without a key,
// 409 while the first request with the key runs, 422 for a key reused with
// another body. Errors are application/problem+json bodies ([Problem]).
// The key space, the stored results and the generated tests are the
// handler's, whichever way its messages come: the same wrapper serves a
// RabbitMQ queue and an HTTP endpoint, and a copy that comes both ways has
// one effect.
//
// docs/http.md walks through an API endpoint and a webhook.
package idemhttp
