package kafkaconn

import (
	"context"
	"crypto/tls"
	"net"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/plain"
)

type nopResolver struct{}

func (nopResolver) LookupBrokerIPAddr(context.Context, kafka.Broker) ([]net.IPAddr, error) {
	return nil, nil
}

// TestWithMetadataTopicsCopiesEverySetting fails when kafka-go's
// Transport gains an exported setting the copy leaves out: every field
// but MetadataTopics must come from the original.
func TestWithMetadataTopicsCopiesEverySetting(t *testing.T) {
	s := Security{TLS: &tls.Config{ServerName: "kafka"}, SASL: plain.Mechanism{Username: "u", Password: "p"}, SessionLifetime: time.Minute}
	tr := s.Transport("relay", 3*time.Second, 2*time.Second)
	tr.Dial = (&net.Dialer{}).DialContext
	tr.IdleTimeout = 7 * time.Second
	tr.Resolver = nopResolver{}
	tr.Context = context.Background()
	tr.MetadataTopics = []string{"ignored"}

	cp := WithMetadataTopics(tr, []string{"b", "a", "b"})
	if want := []string{"a", "b"}; !slices.Equal(cp.MetadataTopics, want) {
		t.Fatalf("MetadataTopics = %q, want %q", cp.MetadataTopics, want)
	}
	if cp.TLS == tr.TLS || cp.TLS.ServerName != "kafka" {
		t.Fatalf("TLS %p (server name %q): want a clone of %p", cp.TLS, cp.TLS.ServerName, tr.TLS)
	}
	r, ok := cp.SASL.(*rotator)
	if !ok || r == tr.SASL.(*rotator) || r.mech != tr.SASL.(*rotator).mech || r.lifetime != time.Minute {
		t.Fatalf("SASL %#v: want a rotator of its own around the same mechanism", cp.SASL)
	}
	orig, got := reflect.ValueOf(tr).Elem(), reflect.ValueOf(cp).Elem()
	for i := range orig.NumField() {
		f := orig.Type().Field(i)
		switch {
		case !f.IsExported(), f.Name == "MetadataTopics", f.Name == "TLS", f.Name == "SASL":
			continue
		case f.Type.Kind() == reflect.Func:
			if orig.Field(i).Pointer() != got.Field(i).Pointer() {
				t.Errorf("%s not copied", f.Name)
			}
		case !reflect.DeepEqual(orig.Field(i).Interface(), got.Field(i).Interface()):
			t.Errorf("%s = %v, want %v", f.Name, got.Field(i).Interface(), orig.Field(i).Interface())
		}
	}
}

// TestWithMetadataTopicsNeverAll: no topic must mean the brokers alone,
// not kafka-go's nil (every topic of the cluster).
func TestWithMetadataTopicsNeverAll(t *testing.T) {
	if cp := WithMetadataTopics(&kafka.Transport{}, nil); cp.MetadataTopics == nil {
		t.Fatal("MetadataTopics is nil: kafka-go would ask for every topic")
	}
}
