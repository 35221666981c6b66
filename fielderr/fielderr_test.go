package fielderr

import (
	"errors"
	"testing"
	"time"
)

func TestErrorText(t *testing.T) {
	for _, tc := range []struct {
		e    *Error
		want string
	}{
		{&Error{Field: "Database.URL", Err: ErrRequired}, "Database.URL: is required"},
		{&Error{Field: "Slot", Value: "Bad", Err: errors.New("use lower case")}, `Slot "Bad": use lower case`},
		{&Error{Field: "Linger", Value: -time.Second, Err: errors.New("negative")}, "Linger -1s: negative"},
	} {
		if got := tc.e.Error(); got != tc.want {
			t.Errorf("%q, want %q", got, tc.want)
		}
	}
}

func TestList(t *testing.T) {
	var l List
	if l.Err() != nil {
		t.Fatal("an empty list is no error")
	}
	l.Wrap("Name", ErrRequired)
	l.Fail("MaxBatch", 0, "use %d or more", 1)
	err := l.Err()
	if !errors.Is(err, ErrRequired) {
		t.Errorf("%v does not wrap ErrRequired", err)
	}
	var fe *Error
	if !errors.As(err, &fe) || fe.Field != "Name" {
		t.Errorf("first field error %v", fe)
	}
	if want := "Name: is required\nMaxBatch 0: use 1 or more"; err.Error() != want {
		t.Errorf("%q, want %q", err, want)
	}
}

func TestNested(t *testing.T) {
	var l List
	l.Nested("Registry", errors.Join(&Error{Field: "URL", Err: ErrRequired}, errors.New("plain")))
	l.Nested("Registry", nil)
	l.Nested("Other", &Error{Field: "Timeout", Value: -1, Err: errors.New("must be positive")})
	want := "Registry.URL: is required\nRegistry: plain\nOther.Timeout -1: must be positive"
	if got := l.Err().Error(); got != want {
		t.Errorf("%q, want %q", got, want)
	}
	if !errors.Is(l.Err(), ErrRequired) {
		t.Error("the nested field error's cause is lost")
	}
}
