package alerts

import (
	"strings"
	"testing"
)

func TestEscape(t *testing.T) {
	tests := []struct{ in, want string }{
		{"<!channel>", "&lt;!channel&gt;"},
		{"<!here> now", "&lt;!here&gt; now"},
		{"<http://evil.example|your bank>", "&lt;http://evil.example|your bank&gt;"},
		{"<@U123> & co", "&lt;@U123&gt; &amp; co"},
		{"plain", "plain"},
	}
	for _, tt := range tests {
		if got := escape(tt.in); got != tt.want {
			t.Errorf("escape(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestCodeSpan(t *testing.T) {
	tests := []struct{ in, want string }{
		{"re_4821a", "`re_4821a`"},
		{"a`b", "`a'b`"},
		{"x\ny", "`x y`"},
		{"", "—"},
		{"<!channel>", "`&lt;!channel&gt;`"},
	}
	for _, tt := range tests {
		if got := code(tt.in); got != tt.want {
			t.Errorf("code(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestTruncateEscapedKeepsEntitiesWhole(t *testing.T) {
	s := strings.Repeat("a", 8) + "&amp;tail"
	got := truncateEscaped(s, 11)
	if got != strings.Repeat("a", 8)+"…" {
		t.Errorf("truncateEscaped(%q, 11) = %q, want the entity dropped whole", s, got)
	}
}
