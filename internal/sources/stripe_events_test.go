package sources

import (
	"encoding/json"
	"strings"
	"testing"
)

// scanHead reads what encoding/json reads, or declines.
func TestScanHead(t *testing.T) {
	tests := []struct {
		name, in string
		want     objectHead
		ok       bool
	}{
		{"charge", `{"id":"ch_1","object":"charge","amount":100,"created":1700000000,"metadata":{}}`,
			objectHead{ID: "ch_1", Object: "charge", Created: 1700000000}, true},
		{"spaces and nesting first", ` { "metadata" : {"id":"x","a":[1,{"created":2}]} , "object" : "refund" ,
			"note":"a \"quoted\" }", "created": 1700000001, "id" : "re_1" } `,
			objectHead{ID: "re_1", Object: "refund", Created: 1700000001}, true},
		{"fields missing", `{"id":"pi_1"}`, objectHead{ID: "pi_1"}, true},
		{"null id", `{"id":null,"object":"charge","created":5}`, objectHead{Object: "charge", Created: 5}, true},
		{"escaped id declines", `{"id":"ch_\u0031","object":"charge","created":5}`, objectHead{}, false},
		{"escaped key declines", `{"i\u0064":"ch_1"}`, objectHead{}, false},
		{"a key in another case declines", `{"ID":"ch_1","object":"charge","created":5}`, objectHead{}, false},
		{"float created declines", `{"id":"ch_1","object":"charge","created":1.5}`, objectHead{}, false},
		{"empty", `{}`, objectHead{}, true},
	}
	for _, tt := range tests {
		got, ok := scanHead([]byte(tt.in))
		if ok != tt.ok || ok && got != tt.want {
			t.Errorf("scanHead(%s) = %+v, %t; want %+v, %t", tt.name, got, ok, tt.want, tt.ok)
		}
		var std objectHead
		if ok && json.Unmarshal([]byte(tt.in), &std) == nil && std != got {
			t.Errorf("scanHead(%s) = %+v, encoding/json reads %+v", tt.name, got, std)
		}
	}
}

// FuzzScanHead: on any valid JSON object without repeated keys, scanHead
// either declines or agrees with encoding/json.
func FuzzScanHead(f *testing.F) {
	for _, s := range []string{`{"id":"ch_1","object":"charge","created":1}`, `{"a":[{"id":1}],"id":"x"}`,
		`{"created":-3,"object":"refund","x":"\"}"}`, `{"id":"","object":null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		var raw map[string]json.RawMessage
		if !json.Valid(b) || json.Unmarshal(b, &raw) != nil {
			return
		}
		var keys []string
		dec := json.NewDecoder(strings.NewReader(s))
		if err := topKeys(dec, &keys); err != nil || len(keys) != len(raw) {
			return // repeated keys: encoding/json keeps the last, scanHead the first
		}
		got, ok := scanHead(b)
		var std objectHead
		if !ok || json.Unmarshal(b, &std) != nil {
			return
		}
		if got != std {
			t.Errorf("scanHead(%s) = %+v, encoding/json reads %+v", s, got, std)
		}
	})
}

// topKeys lists the keys at the top level of the object dec reads.
func topKeys(dec *json.Decoder, keys *[]string) error {
	if _, err := dec.Token(); err != nil {
		return err
	}
	for dec.More() {
		k, err := dec.Token()
		if err != nil {
			return err
		}
		*keys = append(*keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}
