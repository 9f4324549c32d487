package alerts

import (
	"context"
	"errors"
	"fmt"

	"reconcile/internal/redact"

	"github.com/slack-go/slack"
)

// ErrUncheckable is returned by Check for an incoming webhook: one cannot
// be asked anything without posting to it.
var ErrUncheckable = errors.New("an incoming webhook cannot be checked without posting to it")

// Check asks Slack, without posting, whether delivery would work: with a
// bot token, auth.test. It returns what Slack said the token is. A
// webhook returns ErrUncheckable, posting nothing; errors name the setting
// to fix and never a secret (docs/design.md, "Errors").
func (d *Deliverer) Check(ctx context.Context) (string, error) {
	switch d.mode {
	case modeWebhook:
		return "", fmt.Errorf("%w (%s); nothing was posted", ErrUncheckable, d.where())
	case modeBot:
	default:
		return "", ErrNotConfigured
	}
	actx, cancel := context.WithTimeout(ctx, d.opts.Timeout)
	defer cancel()
	resp, err := d.client.AuthTestContext(actx)
	if err != nil {
		if se, ok := errors.AsType[slack.SlackErrorResponse](err); ok {
			if fix, known := permanentFixes[se.Err]; known {
				return "", fmt.Errorf("slack auth.test (%s): %s: %s", d.where(), se.Err, fix)
			}
		}
		return "", fmt.Errorf("auth.test: %s", d.errText(err))
	}
	// auth.test reads the token only: whether SLACK_CHANNEL exists and
	// the bot may post there is not checked, and the line says so.
	return fmt.Sprintf("auth.test accepted SLACK_BOT_TOKEN (%s) as %s in team %s; SLACK_CHANNEL %s not checked (auth.test reads only the token)",
		d.where(), redact.Text(resp.User), redact.Text(resp.Team), redact.Text(d.opts.Channel)), nil
}
