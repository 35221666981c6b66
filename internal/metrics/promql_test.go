package metrics

import (
	"fmt"
	"sort"
	"strings"
	"testing"
)

// A small PromQL lexer for the dashboard and alert tests: it finds the
// metric names an expression selects, skipping label names (in matchers
// and in by/without/on/ignoring/group_left/group_right lists), functions,
// aggregation operators, keywords, numbers, durations, ranges, strings and
// Grafana variables. It rejects unbalanced brackets and unknown functions,
// so a typo in a function name cannot hide a metric name.

type tokKind int

const (
	tokIdent tokKind = iota
	tokNumber
	tokString
	tokRange // [5m], [$__rate_interval], [1h:5m]
	tokVar   // $x, ${x}
	tokPunct
)

type token struct {
	kind tokKind
	text string
}

func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}

func isIdentChar(c byte) bool { return isIdentStart(c) || c >= '0' && c <= '9' }

func lexPromQL(s string) ([]token, error) {
	var toks []token
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			i++
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			j := i + 1
			for ; j < len(s) && s[j] != c; j++ {
				if s[j] == '\\' && c != '`' {
					j++
				}
			}
			if j >= len(s) {
				return nil, fmt.Errorf("unterminated string at %d", i)
			}
			toks = append(toks, token{tokString, s[i+1 : j]})
			i = j + 1
		case c == '[':
			j := strings.IndexByte(s[i:], ']')
			if j < 0 {
				return nil, fmt.Errorf("unterminated range at %d", i)
			}
			toks = append(toks, token{tokRange, s[i : i+j+1]})
			i += j + 1
		case c == '$':
			j := i + 1
			if j < len(s) && s[j] == '{' {
				k := strings.IndexByte(s[j:], '}')
				if k < 0 {
					return nil, fmt.Errorf("unterminated variable at %d", i)
				}
				j += k + 1
			} else {
				for j < len(s) && isIdentChar(s[j]) {
					j++
				}
			}
			toks = append(toks, token{tokVar, s[i:j]})
			i = j
		case c >= '0' && c <= '9' || c == '.' && i+1 < len(s) && s[i+1] >= '0' && s[i+1] <= '9':
			j := i
			for j < len(s) && (isIdentChar(s[j]) && s[j] != ':' || s[j] == '.' ||
				(s[j] == '+' || s[j] == '-') && (s[j-1] == 'e' || s[j-1] == 'E')) {
				j++
			}
			toks = append(toks, token{tokNumber, s[i:j]})
			i = j
		case isIdentStart(c):
			j := i
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			toks = append(toks, token{tokIdent, s[i:j]})
			i = j
		default:
			if i+1 < len(s) {
				switch two := s[i : i+2]; two {
				case "==", "!=", "=~", "!~", "<=", ">=":
					toks = append(toks, token{tokPunct, two})
					i += 2
					continue
				}
			}
			if !strings.ContainsRune("(){},=<>+-*/%^@", rune(c)) {
				return nil, fmt.Errorf("unexpected %q at %d", c, i)
			}
			toks = append(toks, token{tokPunct, string(c)})
			i++
		}
	}
	return toks, nil
}

// promqlFunctions are PromQL's functions (Prometheus 3).
var promqlFunctions = set(strings.Fields(`abs absent absent_over_time acos acosh asin asinh atan atanh avg_over_time
	ceil changes clamp clamp_max clamp_min cos cosh count_over_time day_of_month day_of_week day_of_year days_in_month
	deg delta deriv double_exponential_smoothing exp floor histogram_avg histogram_count histogram_fraction
	histogram_quantile histogram_stddev histogram_stdvar histogram_sum holt_winters hour idelta increase info irate
	label_join label_replace last_over_time ln log10 log2 mad_over_time max_over_time min_over_time minute month pi
	predict_linear present_over_time quantile_over_time rad rate resets round scalar sgn sin sinh sort sort_by_label
	sort_by_label_desc sort_desc sqrt stddev_over_time stdvar_over_time sum_over_time tan tanh time timestamp vector year`)...)

// promqlAggregations are the aggregation operators.
var promqlAggregations = set(strings.Fields(`sum min max avg group stddev stdvar count count_values bottomk topk
	quantile limitk limit_ratio`)...)

var matchOps = set("=", "!=", "=~", "!~")

// labelListKeywords take a parenthesised list of label names.
var labelListKeywords = set("by", "without", "on", "ignoring", "group_left", "group_right")

// promqlKeywords are the other reserved words.
var promqlKeywords = set("and", "or", "unless", "bool", "offset", "atan2", "Inf", "NaN", "inf", "nan", "start", "end")

func set(words ...string) map[string]bool {
	m := make(map[string]bool, len(words))
	for _, w := range words {
		m[w] = true
	}
	return m
}

// matcher is one label matcher of a selector: label op value, with value
// a string's contents or a Grafana variable ($x, ${x}).
type matcher struct{ label, op, value string }

// selector is one vector selector: its metric name (empty for a
// {__name__=~"..."} selector) and its label matchers.
type selector struct {
	metric   string
	matchers []matcher
}

// matches reports whether s has a matcher label op value.
func (s selector) matches(label, op, value string) bool {
	for _, m := range s.matchers {
		if m.label == label && m.op == op && m.value == value {
			return true
		}
	}
	return false
}

// promqlMetrics returns the metric names expr selects, sorted, once each.
func promqlMetrics(expr string) ([]string, error) {
	sels, err := promqlSelectors(expr)
	if err != nil {
		return nil, err
	}
	found := map[string]bool{}
	for _, s := range sels {
		if s.metric != "" {
			found[s.metric] = true
		}
	}
	out := make([]string, 0, len(found))
	for m := range found {
		out = append(out, m)
	}
	sort.Strings(out)
	return out, nil
}

// promqlSelectors returns the vector selectors of expr, in order.
func promqlSelectors(expr string) ([]selector, error) {
	toks, err := lexPromQL(expr)
	if err != nil {
		return nil, err
	}
	var sels []selector
	lastMetric := -1 // index of the token that named the last selector's metric
	var stack []string
	next := func(i int) token {
		if i+1 < len(toks) {
			return toks[i+1]
		}
		return token{kind: -1}
	}
	for i := 0; i < len(toks); i++ {
		t := toks[i]
		switch t.kind {
		case tokPunct:
			switch t.text {
			case "(", "{":
				stack = append(stack, t.text)
			case ")", "}":
				want := map[string]string{")": "(", "}": "{"}[t.text]
				if len(stack) == 0 || stack[len(stack)-1] != want {
					return nil, fmt.Errorf("unbalanced %q", t.text)
				}
				stack = stack[:len(stack)-1]
			}
			if t.text == "{" {
				if lastMetric < 0 || lastMetric != i-1 {
					sels = append(sels, selector{}) // {__name__=...} without a name in front
				}
				sel := &sels[len(sels)-1]
				// Matchers: label op value [, ...]; only __name__ names a metric.
				j := i + 1
				for j < len(toks) && toks[j].text != "}" {
					if j+2 >= len(toks) || toks[j].kind != tokIdent || toks[j+2].kind != tokString && toks[j+2].kind != tokVar ||
						!matchOps[toks[j+1].text] {
						return nil, fmt.Errorf("bad label matcher at %q", toks[j].text)
					}
					m := matcher{toks[j].text, toks[j+1].text, toks[j+2].text}
					if m.label == "__name__" && m.op == "=" && sel.metric == "" {
						sel.metric = m.value
					}
					sel.matchers = append(sel.matchers, m)
					j += 3
					if j < len(toks) && toks[j].text == "," {
						j++
					}
				}
				i = j - 1 // the "}" closes the brace on the next round
			}
		case tokIdent:
			n := next(i)
			switch {
			case labelListKeywords[t.text]:
				if n.text != "(" {
					if t.text == "group_left" || t.text == "group_right" {
						continue // without a label list
					}
					return nil, fmt.Errorf("%s without a label list", t.text)
				}
				j := i + 2
				for ; j < len(toks) && toks[j].text != ")"; j++ {
					if toks[j].kind != tokIdent && toks[j].text != "," {
						return nil, fmt.Errorf("unexpected %q in the %s list", toks[j].text, t.text)
					}
				}
				if j == len(toks) {
					return nil, fmt.Errorf("unterminated %s list", t.text)
				}
				i = j
			case promqlAggregations[t.text], promqlKeywords[t.text]:
			case n.text == "(":
				if !promqlFunctions[t.text] {
					return nil, fmt.Errorf("unknown function %s()", t.text)
				}
			default:
				sels = append(sels, selector{metric: t.text})
				lastMetric = i
			}
		}
	}
	if len(stack) > 0 {
		return nil, fmt.Errorf("unclosed %q", stack[len(stack)-1])
	}
	return sels, nil
}

func TestPromQLMetrics(t *testing.T) {
	cases := []struct {
		expr string
		want string // space-separated metric names
	}{
		{`outbox_relay_leader`, "outbox_relay_leader"},
		{`up{job="outbox-relay", instance=~"a.*"} == 0`, "up"},
		{`sum by (topic) (rate(outbox_relay_events_published_total[$__rate_interval]))`, "outbox_relay_events_published_total"},
		{`sum(rate(x_total[5m])) without (instance, job)`, "x_total"},
		{`histogram_quantile(0.99, sum by (le) (rate(a_seconds_bucket[5m])))`, "a_seconds_bucket"},
		{`outbox_relay_leader == 1 and on (instance, job) outbox_relay_replication_connected == 0`,
			"outbox_relay_leader outbox_relay_replication_connected"},
		{`a * on (x) group_left (y, z) b`, "a b"},
		{`a / ignoring (le) group_left b offset 5m`, "a b"},
		{`time() - max by (table) (c_timestamp_seconds) > 1e9 or vector(0)`, "c_timestamp_seconds"},
		{`{__name__="by_name", slot="by"}`, "by_name"},
		{`label_replace(m{a="sum(x)"}, "dst", "$1", "src", "(.*)")`, "m"},
		{`max_over_time(m[1h:5m]) > +Inf`, "m"},
		{`min by (slot) (outbox_relay_slot_wal_exhaustion_seconds) < 3600 # a comment with a_name`, "outbox_relay_slot_wal_exhaustion_seconds"},
		{`sum by (job) (x) > 0.2 * max by (job) (y) > .5`, "x y"},
		{`a{slot="$slot"} + ${b_var}`, "a"},
	}
	for _, c := range cases {
		got, err := promqlMetrics(c.expr)
		if err != nil {
			t.Errorf("%s: %v", c.expr, err)
			continue
		}
		if strings.Join(got, " ") != c.want {
			t.Errorf("%s: got %q, want %q", c.expr, got, c.want)
		}
	}
	for _, bad := range []string{
		`sum(rate(x[5m])`,                    // unclosed
		`rate(x[5m]))`,                       // unbalanced
		`rat(x[5m])`,                         // unknown function
		`sum by topic (x)`,                   // label list without parentheses
		`x{a="b"`,                            // unclosed matcher
		`x{a=b}`,                             // label value not a string
		`x{a}`,                               // matcher without operator
		`x{a="unterminated}`,                 // unterminated string
		`sum by (topic, rate(x[5m])) (y)`,    // function in a label list
		`histogram_quantile(0.99, x[5m` + "", // unterminated range
	} {
		if _, err := promqlMetrics(bad); err == nil {
			t.Errorf("%s: accepted, want an error", bad)
		}
	}
}

func TestPromQLSelectors(t *testing.T) {
	sels, err := promqlSelectors(`sum(rate(a_total{job=~"$job", instance=~"${instance}"}[5m])) / b + {__name__="c", slot="s"} + {__name__=~"d.+"}`)
	if err != nil {
		t.Fatal(err)
	}
	want := []selector{
		{"a_total", []matcher{{"job", "=~", "$job"}, {"instance", "=~", "${instance}"}}},
		{"b", nil},
		{"c", []matcher{{"__name__", "=", "c"}, {"slot", "=", "s"}}},
		{"", []matcher{{"__name__", "=~", "d.+"}}},
	}
	if fmt.Sprint(sels) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", sels, want)
	}
	if !sels[0].matches("job", "=~", "$job") || sels[0].matches("job", "=", "$job") {
		t.Error("matches")
	}
}
