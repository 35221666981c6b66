package relay

import (
	"reflect"
	"testing"
	"time"
)

// TestZeroMeansDefault: a Config with only the required fields set gets
// every default, so it equals DefaultConfig with those fields; a value
// that is set is kept, negative ones included (off).
func TestZeroMeansDefault(t *testing.T) {
	var cfg Config
	cfg.Database.URL = "postgres://app@db/app"
	cfg.Kafka.Brokers = []string{"k:9092"}
	want := DefaultConfig()
	want.Database.URL, want.Kafka.Brokers = cfg.Database.URL, cfg.Kafka.Brokers
	if got := cfg.withDefaults(); !reflect.DeepEqual(got, want) {
		t.Fatalf("zero Config with defaults\n got %+v\nwant %+v", got, want)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("a Config with only the required fields: %v", err)
	}
	cfg.Window.StallTimeout, cfg.Checkpoints.Interval, cfg.Publish.MaxBatch = -1, -time.Second, 7
	got := cfg.withDefaults()
	if got.Window.StallTimeout != -1 || got.Checkpoints.Interval != -time.Second || got.Publish.MaxBatch != 7 {
		t.Fatalf("set values changed: %+v", got)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("negative (off) values refused: %v", err)
	}
	// Every field DefaultConfig sets is one withDefaults fills: a new
	// default must be added to both.
	d := reflect.ValueOf(DefaultConfig())
	z := reflect.ValueOf(Config{}.withDefaults())
	var walk func(path string, d, z reflect.Value)
	walk = func(path string, d, z reflect.Value) {
		if d.Kind() == reflect.Struct {
			for i := range d.NumField() {
				walk(path+"."+d.Type().Field(i).Name, d.Field(i), z.Field(i))
			}
			return
		}
		if !d.IsZero() && !reflect.DeepEqual(d.Interface(), z.Interface()) {
			t.Errorf("%s: default %v, but a zero field becomes %v", path, d, z)
		}
	}
	walk("Config", d, z)
}
