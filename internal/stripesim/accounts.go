package stripesim

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
)

// Account is a connected account of the platform, listed at /v1/accounts
// and named by requests in their Stripe-Account header.
type Account struct {
	ID string // acct_…
	// Name is business_profile.name, DisplayName
	// settings.dashboard.display_name; either may be empty (null).
	Name        string
	DisplayName string
	// Created is when the account was connected: /v1/accounts lists the
	// newest first.
	Created time.Time
	// Type is "standard" (the default), "express" or "custom".
	Type string
}

type accountJSON struct {
	ID               string                `json:"id"`
	Object           string                `json:"object"`
	BusinessProfile  accountProfileJSON    `json:"business_profile"`
	ChargesEnabled   bool                  `json:"charges_enabled"`
	Controller       accountControllerJSON `json:"controller"`
	Country          string                `json:"country"`
	Created          int64                 `json:"created"`
	DefaultCurrency  string                `json:"default_currency"`
	DetailsSubmitted bool                  `json:"details_submitted"`
	Email            *string               `json:"email"`
	Metadata         map[string]string     `json:"metadata"`
	PayoutsEnabled   bool                  `json:"payouts_enabled"`
	Settings         accountSettingsJSON   `json:"settings"`
	Type             string                `json:"type"`
}

type accountProfileJSON struct {
	Name *string `json:"name"`
}

type accountControllerJSON struct {
	// IsController is null unless the platform controls the account.
	IsController *bool  `json:"is_controller"`
	Type         string `json:"type"`
}

type accountSettingsJSON struct {
	Dashboard accountDashboardJSON `json:"dashboard"`
}

type accountDashboardJSON struct {
	DisplayName *string `json:"display_name"`
	Timezone    string  `json:"timezone"`
}

// renderAccount returns a in Stripe's wire format. A standard account
// controls itself (controller.type "account"); the platform controls an
// express or custom one ("application", is_controller true).
func renderAccount(a Account) ([]byte, error) {
	c := accountControllerJSON{Type: "account"}
	if a.Type != "standard" {
		yes := true
		c = accountControllerJSON{IsController: &yes, Type: "application"}
	}
	return json.Marshal(accountJSON{
		ID: a.ID, Object: "account", BusinessProfile: accountProfileJSON{Name: nullable(a.Name)},
		ChargesEnabled: true, Controller: c, Country: "US", Created: a.Created.Unix(), DefaultCurrency: "usd",
		DetailsSubmitted: true, Metadata: map[string]string{}, PayoutsEnabled: true,
		Settings: accountSettingsJSON{Dashboard: accountDashboardJSON{DisplayName: nullable(a.DisplayName), Timezone: "Etc/UTC"}},
		Type:     a.Type,
	})
}

// AddAccount connects an account to the platform: it is listed at
// /v1/accounts and retrieved at /v1/accounts/{id}, and requests bearing
// its id in Stripe-Account see its data (As(a.ID)), which starts empty.
func (s *Server) AddAccount(a Account) error {
	if !strings.HasPrefix(a.ID, "acct_") || len(a.ID) == len("acct_") {
		return fmt.Errorf("add account %q: the id must start with acct_", a.ID)
	}
	if a.Type == "" {
		a.Type = "standard"
	}
	switch a.Type {
	case "standard", "express", "custom":
	default:
		return fmt.Errorf("add account %s: unknown type %q (want standard, express or custom)", a.ID, a.Type)
	}
	body, err := renderAccount(a)
	if err != nil {
		return fmt.Errorf("add account %s: %w", a.ID, err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.books[a.ID]; dup {
		return fmt.Errorf("add account %s: %w", a.ID, errors.New("duplicate id"))
	}
	s.books[a.ID] = newBook()
	s.books[""].lists[ListAccounts].add(&entry{id: a.ID, created: a.Created.Unix(), body: body})
	return nil
}

// accountInvalid is Stripe's answer to a Stripe-Account header, or an
// /v1/accounts/{id}, naming an account the key has no access to: it does
// not tell a foreign account from one that does not exist.
func (s *Server) accountInvalid(id string) *apiErr {
	return &apiErr{status: http.StatusForbidden, typ: "invalid_request_error", code: "account_invalid",
		msg: fmt.Sprintf("The provided key '%s' does not have access to account '%s' (or that account does not exist). Application access may have been revoked.",
			maskKey(s.apiKey), id)}
}
