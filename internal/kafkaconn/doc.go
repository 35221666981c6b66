// Package kafkaconn builds the TLS and SASL settings of every Kafka
// connection the relay makes (produce, metadata, topic creation, ping, the
// dlq commands' writer), so that all of them authenticate the same way.
//
// A Config names files and credentials; Build loads and checks them once,
// at start-up, so a missing file or an unknown mechanism is a
// configuration error rather than a connection failure found later. The
// resulting Security is applied to kafka-go's Transport (Client and
// Writer) or Dialer.
//
// Certificate verification is never skipped implicitly: only
// TLSConfig.InsecureSkipVerify does that, and it cannot be combined with a
// CA file (which would be ignored). Failures a retry cannot cure - an
// unverifiable broker certificate, a rejected client certificate, wrong
// SASL credentials - are recognised by Classify, so callers can stop with
// a message that names the fix instead of retrying forever.
package kafkaconn
