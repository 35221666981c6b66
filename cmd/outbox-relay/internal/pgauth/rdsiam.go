//go:build !nordsiam

package pgauth

import "github.com/outbox-relay/outbox-relay/cmd/outbox-relay/internal/rdsiam"

// The AWS SDK is linked in unless built with -tags nordsiam.
func init() { RDSIAM = rdsiam.New }
