// Package cloudevents holds no code: its tests check the relay's
// cloudevents record format (record.FormatCloudEvents) with the
// official CloudEvents Go SDK and its Kafka binding (kafka_sarama), which
// are test-only dependencies of this separate module.
package cloudevents
