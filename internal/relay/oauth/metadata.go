package oauth

import (
	"encoding/json"
	"net/http"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/oauthex"
)

// serverMeta is RFC 8414's metadata as the relay serves it. The SDK's
// oauthex.AuthServerMeta always writes jwks_uri, empty here (the relay
// signs nothing a client checks), so the relay writes its own.
type serverMeta struct {
	Issuer                        string   `json:"issuer"`
	AuthorizationEndpoint         string   `json:"authorization_endpoint"`
	TokenEndpoint                 string   `json:"token_endpoint"`
	RegistrationEndpoint          string   `json:"registration_endpoint"`
	RevocationEndpoint            string   `json:"revocation_endpoint"`
	ScopesSupported               []string `json:"scopes_supported"`
	ResponseTypesSupported        []string `json:"response_types_supported"`
	ResponseModesSupported        []string `json:"response_modes_supported"`
	GrantTypesSupported           []string `json:"grant_types_supported"`
	TokenAuthMethodsSupported     []string `json:"token_endpoint_auth_methods_supported"`
	RevocationAuthMethods         []string `json:"revocation_endpoint_auth_methods_supported"`
	CodeChallengeMethodsSupported []string `json:"code_challenge_methods_supported"`
	ClientIDMetadataDocument      bool     `json:"client_id_metadata_document_supported"`
	IssParameterSupported         bool     `json:"authorization_response_iss_parameter_supported"`
}

func (s *Server) serverMetadata(w http.ResponseWriter, _ *http.Request) {
	pub := s.cfg.PublicURL
	writeJSON(w, http.StatusOK, serverMeta{
		Issuer: pub, AuthorizationEndpoint: pub + AuthorizePath, TokenEndpoint: pub + TokenPath,
		RegistrationEndpoint: pub + RegisterPath, RevocationEndpoint: pub + RevokePath,
		ScopesSupported:        ScopesSupported(),
		ResponseTypesSupported: []string{"code"}, ResponseModesSupported: []string{"query"},
		GrantTypesSupported:       []string{grantCode, grantRefresh},
		TokenAuthMethodsSupported: []string{"none"}, RevocationAuthMethods: []string{"none"},
		CodeChallengeMethodsSupported: []string{"S256"},
		ClientIDMetadataDocument:      true, IssParameterSupported: true,
	})
}

// resourceMetadata is RFC 9728's, served by the SDK's handler: at the
// root and the root followed by /mcp it describes /mcp, followed by
// /mcp/<device> that device's endpoint. Followed by a path with a
// trailing '/', its resource is that URL as it was typed (RFC 9728 3.3
// has a client check that it is), which names the same resource. It lists
// no scopes: the 401's challenge names them.
func (s *Server) resourceMetadata(w http.ResponseWriter, r *http.Request) {
	dev := r.PathValue("device")
	if dev != "" && !validDevice(dev) {
		http.NotFound(w, r)
		return
	}
	resource := s.Resource(dev)
	if strings.HasSuffix(r.URL.Path, mcpPath+"/") || dev != "" && strings.HasSuffix(r.URL.Path, "/") {
		resource += "/"
	}
	auth.ProtectedResourceMetadataHandler(&oauthex.ProtectedResourceMetadata{
		Resource:               resource,
		AuthorizationServers:   []string{s.cfg.PublicURL},
		BearerMethodsSupported: []string{"header"},
		ResourceName:           "CommandCore relay",
	}).ServeHTTP(w, r)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "cannot encode the answer", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Pragma", "no-cache")
	w.WriteHeader(status)
	w.Write(append(body, '\n'))
}
