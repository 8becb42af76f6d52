package enrollment

import (
	"strings"
	"testing"

	"github.com/commandcore/commandcore/internal/errcode"
)

func TestDecodeEnrollMessages(t *testing.T) {
	if r, err := DecodeRequest([]byte(`{"code":"ccE-X","name":"box"}`)); err != nil || r.Code != "ccE-X" || r.Name != "box" {
		t.Fatalf("request: %+v %v", r, err)
	}
	for _, bad := range []string{``, `{}{}`, `{"code":"c","extra":1}`, `[]`, `{"code":7}`} {
		if _, err := DecodeRequest([]byte(bad)); errcode.From(err).Code != errcode.InvalidArgument {
			t.Errorf("request %q: %v", bad, err)
		}
	}
	key := "Lyn4RYnDXkmOrIiW3m6IFLu2spJELzkHz2lY4lRpDlo=" // 32 bytes
	good := `{"device_id":"d","name":"n","token":"t","secret":"MDEyMzQ1Njc4OWFiY2RlZg==","grant_key":"` + key + `"}`
	if r, err := DecodeResponse([]byte(good)); err != nil || r.Token != "t" || len(r.Secret) != 16 {
		t.Fatalf("response: %+v %v", r, err)
	}
	for _, bad := range []string{
		`{}`,
		strings.Replace(good, `"token":"t"`, `"token":""`, 1),
		strings.Replace(good, key, "AAAA", 1),
		strings.Replace(good, `"name":"n"`, `"name":"n","x":1`, 1),
		good + `{}`,
	} {
		if _, err := DecodeResponse([]byte(bad)); err == nil {
			t.Errorf("response %q accepted", bad)
		}
	}
}

func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(`{"code":"ccE-X","name":"box"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeRequest(data)
		if err == nil && r == nil {
			t.Fatal("nil request without an error")
		}
	})
}

func FuzzDecodeResponse(f *testing.F) {
	f.Add([]byte(`{"device_id":"d","name":"n","token":"t","secret":"MDEyMzQ1Njc4OWFiY2RlZg==","grant_key":"Lyn4RYnDXkmOrIiW3m6IFLu2spJELzkHz2lY4lRpDlo="}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := DecodeResponse(data)
		if err != nil {
			return
		}
		if r.DeviceID == "" || r.Token == "" || len(r.Secret) < 16 {
			t.Fatalf("accepted an incomplete identity: %+v", r)
		}
	})
}
