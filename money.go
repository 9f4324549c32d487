package reconcile

import (
	"strconv"
	"strings"
)

// Money is an exact amount in the currency's minor units (cents for USD,
// yen for JPY, fils for KWD), as Stripe counts it. Never a float.
type Money struct {
	Amount   int64  `json:"amount"`
	Currency string `json:"currency"` // ISO 4217, lower case, as Stripe
}

// Exponent is the number of decimal places of a currency's minor unit as
// Stripe counts it: 0 for zero-decimal currencies, 3 for the three-decimal
// ones, 2 otherwise.
func Exponent(currency string) int {
	switch strings.ToLower(currency) {
	case "bif", "clp", "djf", "gnf", "jpy", "kmf", "krw", "mga", "pyg", "rwf",
		"ugx", "vnd", "vuv", "xaf", "xof", "xpf":
		return 0
	case "bhd", "jod", "kwd", "omr", "tnd":
		return 3
	}
	return 2
}

// Major formats the amount in major units with the currency's decimals and
// thousands separated by commas: 8900 usd → "89.00", 12000 jpy → "12,000",
// 1000 kwd → "1.000". The arithmetic is on integers; nothing is rounded.
func (m Money) Major() string {
	return formatMinor(strconv.FormatInt(m.Amount, 10), Exponent(m.Currency), true)
}

// Decimal formats the amount in major units without thousands separators
// ("1234.50"), for spreadsheets and machines.
func (m Money) Decimal() string {
	return formatMinor(strconv.FormatInt(m.Amount, 10), Exponent(m.Currency), false)
}

// String formats money for people: "USD 89.00", "JPY 12,000".
func (m Money) String() string {
	return strings.ToUpper(m.Currency) + " " + m.Major()
}

// formatMinor formats an integer amount of minor units, given as its
// decimal digits with an optional leading '-', in major units. It works on
// the digits so that MinInt64 and sums beyond int64 need no special case.
func formatMinor(digits string, exp int, group bool) string {
	neg := strings.HasPrefix(digits, "-")
	if neg {
		digits = digits[1:]
	}
	for len(digits) <= exp {
		digits = "0" + digits
	}
	whole, frac := digits[:len(digits)-exp], digits[len(digits)-exp:]
	if group && len(whole) > 3 {
		var b strings.Builder
		lead := len(whole) % 3
		if lead > 0 {
			b.WriteString(whole[:lead])
		}
		for i := lead; i < len(whole); i += 3 {
			if b.Len() > 0 {
				b.WriteByte(',')
			}
			b.WriteString(whole[i : i+3])
		}
		whole = b.String()
	}
	s := whole
	if exp > 0 {
		s += "." + frac
	}
	if neg {
		s = "-" + s
	}
	return s
}
