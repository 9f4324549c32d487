package stripesim

import (
	"encoding/json"
	"strings"

	"reconcile"
)

// apiVersion is the version the rendered objects claim, the one stripe-go
// v79 pins.
const apiVersion = "2024-06-20"

// The wire shapes below follow Stripe's API reference field for field where
// the reconciler or stripe-go reads them; struct order keeps the JSON stable.

type chargeJSON struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	AmountCaptured     int64             `json:"amount_captured"`
	AmountRefunded     int64             `json:"amount_refunded"`
	BalanceTransaction *string           `json:"balance_transaction"`
	Captured           bool              `json:"captured"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Customer           *string           `json:"customer"`
	Description        *string           `json:"description"`
	FailureCode        *string           `json:"failure_code"`
	FailureMessage     *string           `json:"failure_message"`
	Livemode           bool              `json:"livemode"`
	Metadata           map[string]string `json:"metadata"`
	Paid               bool              `json:"paid"`
	PaymentIntent      *string           `json:"payment_intent"`
	Refunded           bool              `json:"refunded"`
	Status             string            `json:"status"`
}

type refundJSON struct {
	ID                 string            `json:"id"`
	Object             string            `json:"object"`
	Amount             int64             `json:"amount"`
	BalanceTransaction *string           `json:"balance_transaction"`
	Charge             *string           `json:"charge"`
	Created            int64             `json:"created"`
	Currency           string            `json:"currency"`
	Metadata           map[string]string `json:"metadata"`
	PaymentIntent      *string           `json:"payment_intent"`
	Reason             *string           `json:"reason"`
	ReceiptNumber      *string           `json:"receipt_number"`
	Status             string            `json:"status"`
}

type paymentIntentJSON struct {
	ID             string            `json:"id"`
	Object         string            `json:"object"`
	Amount         int64             `json:"amount"`
	AmountReceived int64             `json:"amount_received"`
	CaptureMethod  string            `json:"capture_method"`
	ClientSecret   string            `json:"client_secret"`
	Created        int64             `json:"created"`
	Currency       string            `json:"currency"`
	Customer       *string           `json:"customer"`
	LatestCharge   *string           `json:"latest_charge"`
	Livemode       bool              `json:"livemode"`
	Metadata       map[string]string `json:"metadata"`
	Status         string            `json:"status"`
}

type eventJSON struct {
	ID              string        `json:"id"`
	Object          string        `json:"object"`
	APIVersion      string        `json:"api_version"`
	Created         int64         `json:"created"`
	Data            eventDataJSON `json:"data"`
	Livemode        bool          `json:"livemode"`
	PendingWebhooks int64         `json:"pending_webhooks"`
	Request         requestJSON   `json:"request"`
	Type            string        `json:"type"`
}

type eventDataJSON struct {
	Object json.RawMessage `json:"object"`
}

type requestJSON struct {
	ID             *string `json:"id"`
	IdempotencyKey *string `json:"idempotency_key"`
}

type errorJSON struct {
	Error errorBodyJSON `json:"error"`
}

type errorBodyJSON struct {
	Code    string `json:"code,omitempty"`
	DocURL  string `json:"doc_url,omitempty"`
	Message string `json:"message"`
	Param   string `json:"param,omitempty"`
	Type    string `json:"type"`
}

// nullable renders an empty string as JSON null, as Stripe does for unset
// references.
func nullable(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

// RawStatus is the Stripe status word the server renders for o: its
// RawStatus when set, else the usual Stripe word for its normalised status.
func RawStatus(o reconcile.ProviderObject) string {
	if o.RawStatus != "" {
		return o.RawStatus
	}
	switch o.Kind {
	case reconcile.Charge:
		switch o.Status {
		case reconcile.Pending:
			return "pending"
		case reconcile.Failed, reconcile.Canceled:
			return "failed"
		}
		return "succeeded"
	case reconcile.Refund:
		switch o.Status {
		case reconcile.Pending:
			return "pending"
		case reconcile.Failed:
			return "failed"
		case reconcile.Canceled:
			return "canceled"
		}
		return "succeeded"
	case reconcile.PaymentIntent:
		switch o.Status {
		case reconcile.Pending:
			return "processing"
		case reconcile.Failed:
			return "requires_payment_method"
		case reconcile.Canceled:
			return "canceled"
		}
		return "succeeded"
	}
	return string(o.Status)
}

// refundCharge is the charge a refund names: its Charge, or its Target when
// that is a charge id.
func refundCharge(o reconcile.ProviderObject) string {
	if o.Charge != "" {
		return o.Charge
	}
	if strings.HasPrefix(o.Target, "ch_") || strings.HasPrefix(o.Target, "py_") {
		return o.Target
	}
	return ""
}

// refundIntent is the payment intent a refund names: its PaymentIntent, or
// its Target when that is an intent id.
func refundIntent(o reconcile.ProviderObject) string {
	if o.PaymentIntent != "" {
		return o.PaymentIntent
	}
	if strings.HasPrefix(o.Target, "pi_") {
		return o.Target
	}
	return ""
}

func metadata(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// render returns o in Stripe's wire format.
func render(o reconcile.ProviderObject) ([]byte, error) {
	created := o.Created.Time().Unix()
	status := RawStatus(o)
	switch o.Kind {
	case reconcile.Charge:
		// An authorised charge that is not captured is "succeeded" at Stripe
		// with captured=false; the normalised Pending says which.
		captured := status == "succeeded" && o.Status != reconcile.Pending
		c := chargeJSON{
			ID: o.ID, Object: "charge", Amount: o.Money.Amount, AmountRefunded: o.AmountRefunded,
			BalanceTransaction: nullable(balanceTxn(o.ID, captured)), Captured: captured, Created: created,
			Currency: o.Money.Currency, Customer: nullable(o.Customer), Metadata: metadata(o.Metadata),
			Paid: status == "succeeded", PaymentIntent: nullable(o.PaymentIntent),
			Refunded: o.Money.Amount > 0 && o.AmountRefunded >= o.Money.Amount, Status: status,
		}
		if captured {
			c.AmountCaptured = o.Money.Amount
		}
		if status == "failed" {
			c.FailureCode = nullable("card_declined")
			c.FailureMessage = nullable("Your card was declined.")
		}
		return json.Marshal(c)
	case reconcile.Refund:
		return json.Marshal(refundJSON{
			ID: o.ID, Object: "refund", Amount: o.Money.Amount,
			BalanceTransaction: nullable(balanceTxn(o.ID, status == "succeeded" || status == "pending")),
			Charge:             nullable(refundCharge(o)), Created: created, Currency: o.Money.Currency,
			Metadata: metadata(o.Metadata), PaymentIntent: nullable(refundIntent(o)), Status: status,
		})
	case reconcile.PaymentIntent:
		p := paymentIntentJSON{
			ID: o.ID, Object: "payment_intent", Amount: o.Money.Amount, CaptureMethod: "automatic",
			ClientSecret: o.ID + "_secret_stripesim", Created: created, Currency: o.Money.Currency,
			Customer: nullable(o.Customer), LatestCharge: nullable(o.Charge), Metadata: metadata(o.Metadata),
			Status: status,
		}
		if status == "succeeded" {
			p.AmountReceived = o.Money.Amount
		}
		return json.Marshal(p)
	}
	return nil, errUnknownKind(o.Kind)
}

func balanceTxn(id string, moved bool) string {
	if !moved {
		return ""
	}
	_, rest, _ := strings.Cut(id, "_")
	return "txn_" + rest
}

func renderError(typ, code, param, msg string) []byte {
	b, _ := json.Marshal(errorJSON{Error: errorBodyJSON{Code: code, Message: msg, Param: param, Type: typ,
		DocURL: docURL(code)}})
	return append(b, '\n')
}

func docURL(code string) string {
	if code == "" {
		return ""
	}
	return "https://stripe.com/docs/error-codes/" + strings.ReplaceAll(code, "_", "-")
}
