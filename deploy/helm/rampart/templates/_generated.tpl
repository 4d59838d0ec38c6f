{{- /*
Every value the chart generates: random tokens and Redis passwords, the Redis aclfile built from them,
and with tls.source=generate the mTLS CA and one certificate per component. Computed once per render
and memoised in .Values._generated, because three templates need the same values: the Secrets
(secrets.yaml, tls.yaml) and the checksums that roll the pods mounting them (rampart.podAnnotations);
a second computation would draw other random values. An existing Secret's value is reused (lookup), so
`helm upgrade` changes nothing unless a Secret was deleted or a certificate is due for renewal.
`helm template` (and helm-python-sdk) have no cluster: lookup finds nothing and every render is fresh.
Returns JSON: {"secrets": {id: base64}, "ca": {...}, "tls": {component: {"ca.crt", "tls.crt",
"tls.key": base64, "notAfter": unix seconds}}}.
*/ -}}
{{- define "rampart.generated" -}}
{{- $root := . -}}
{{- if not (hasKey $root.Values "_generated") -}}
{{- $g := dict "secrets" dict "tls" dict "ca" dict -}}
{{- $_ := set $root.Values "_generated" $g -}}
{{- $_ = include "rampart.generatedSecrets" $root -}}
{{- $_ = include "rampart.generatedTls" $root -}}
{{- end -}}
{{- toJson $root.Values._generated -}}
{{- end -}}

{{/* The ids of the Secrets some enabled component reads: only those are generated (a Secret nobody
     mounts is a credential lying about). */}}
{{- define "rampart.usedSecrets" -}}
{{- $root := . -}}
{{- $used := dict -}}
{{- range $name, $c := $root.Values.components -}}
{{- if $c.enabled -}}
{{- range concat ($c.secretEnv | default list) ($c.secretFiles | default list) ($c.keda.auth | default list) -}}
{{- $_ := set $used .secret true -}}
{{- end -}}
{{- with $c.redisUser -}}
{{- $_ := set $used (index $root.Values.redisUsers .).secret true -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- toJson $used -}}
{{- end -}}

{{/* Random tokens and passwords (48 alphanumerics: they go into URLs as they are), then the aclfile. */}}
{{- define "rampart.generatedSecrets" -}}
{{- $root := . -}}
{{- $out := $root.Values._generated.secrets -}}
{{- $used := include "rampart.usedSecrets" $root | fromJson -}}
{{- range $id, $s := $root.Values.secrets -}}
{{- if and $s.generate (hasKey $used $id) (ne $id "redisAcl") -}}
{{- $old := dig "data" $s.key "" (lookup "v1" "Secret" $root.Release.Namespace $s.name) -}}
{{- if $old -}}
{{- $_ := set $out $id $old -}}
{{- else -}}
{{- $_ := set $out $id (randAlphaNum 48 | b64enc) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- if and $root.Values.secrets.redisAcl.generate (hasKey $used "redisAcl") -}}
{{- $_ := set $out "redisAcl" (include "rampart.redisAclFile" $root | b64enc) -}}
{{- end -}}
{{- end -}}

{{/* The in-cluster Redis's aclfile, as services/common/redis_server.RedisAuth.acl_text writes it: the
     default user off, then one user per role with the SHA-256 of its password (never the password).
     A role whose password nobody uses (no enabled component has redisUser: <role>) is off, without
     one. Its password is generated here (or looked up), so it must be a generated Secret. */}}
{{- define "rampart.redisAclFile" -}}
{{- $root := . -}}
{{- $values := $root.Values._generated.secrets -}}
user default off resetkeys resetchannels -@all
{{ range $role, $u := $root.Values.redisUsers -}}
{{- $password := index $values $u.secret -}}
{{- if and (not $password) (not (index $root.Values.secrets $u.secret).generate) -}}
{{- $s := index $root.Values.secrets $u.secret -}}
{{- $password = dig "data" $s.key "" (lookup "v1" "Secret" $root.Release.Namespace $s.name) -}}
{{- if and (not $password) (hasKey (include "rampart.usedSecrets" $root | fromJson) $u.secret) -}}
{{- fail (printf "redisUsers.%s: the in-cluster Redis needs its password to write the aclfile, but secrets.%s is not generated and Secret %s was not found" $role $u.secret (index $root.Values.secrets $u.secret).name) -}}
{{- end -}}
{{- end -}}
{{- if $password -}}
user {{ $role }} on #{{ b64dec $password | sha256sum }} {{ $u.rules }}
{{ else -}}
user {{ $role }} off {{ $u.rules }}
{{ end -}}
{{- end -}}
{{- end -}}

{{/* tls.source=generate: the CA (reused while it has more than renewBeforeDays left) and each mtls
     component's certificate (reused while signed by that CA with more than renewBeforeDays left),
     ECDSA P-256 as `rampart certs dev` makes them. */}}
{{- define "rampart.generatedTls" -}}
{{- $root := . -}}
{{- $t := $root.Values.tls -}}
{{- if and $t.enabled (eq $t.source "generate") -}}
{{- $g := $root.Values._generated -}}
{{- $ns := $root.Release.Namespace -}}
{{- $now := now | unixEpoch | atoi -}}
{{- $renewBy := add $now (mul (int $t.generate.renewBeforeDays) 86400) -}}
{{- $old := lookup "v1" "Secret" $ns (printf "%s-tls-ca" (include "rampart.fullname" $root)) -}}
{{- $data := dig "data" dict $old -}}
{{- if and (hasKey $data "tls.crt") (hasKey $data "tls.key") (gt (include "rampart.notAfter" $old | atoi) $renewBy) -}}
{{- $_ := set $g "ca" (dict "tls.crt" (index $data "tls.crt") "tls.key" (index $data "tls.key") "notAfter" (include "rampart.notAfter" $old)) -}}
{{- else -}}
{{- $days := int $t.generate.caValidityDays -}}
{{- $ca := genCAWithKey (printf "%s-ca" (include "rampart.fullname" $root)) $days (genPrivateKey "ecdsa") -}}
{{- $_ := set $g "ca" (dict "tls.crt" ($ca.Cert | b64enc) "tls.key" ($ca.Key | b64enc) "notAfter" (add $now (mul $days 86400) | toString)) -}}
{{- end -}}
{{- $signer := buildCustomCert (index $g.ca "tls.crt") (index $g.ca "tls.key") -}}
{{- range $name, $c := $root.Values.components -}}
{{- $ctx := dict "root" $root "name" $name "comp" $c -}}
{{- if and $c.enabled (include "rampart.hasCert" $ctx) -}}
{{- $prev := lookup "v1" "Secret" $ns (include "rampart.tlsSecret" $ctx) -}}
{{- $d := dig "data" dict $prev -}}
{{- if and (hasKey $d "tls.crt") (hasKey $d "tls.key") (eq (index $d "ca.crt" | default "") (index $g.ca "tls.crt")) (gt (include "rampart.notAfter" $prev | atoi) $renewBy) -}}
{{- $_ := set $g.tls $name (dict "ca.crt" (index $d "ca.crt") "tls.crt" (index $d "tls.crt") "tls.key" (index $d "tls.key") "notAfter" (include "rampart.notAfter" $prev)) -}}
{{- else -}}
{{- $names := include "rampart.tlsNames" $ctx | fromJsonArray -}}
{{- $days := int $t.generate.validityDays -}}
{{- $cert := genSignedCertWithKey (first $names) nil $names $days $signer (genPrivateKey "ecdsa") -}}
{{- $_ := set $g.tls $name (dict "ca.crt" (index $g.ca "tls.crt") "tls.crt" ($cert.Cert | b64enc) "tls.key" ($cert.Key | b64enc) "notAfter" (add $now (mul $days 86400) | toString)) -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* When a Secret the chart generated stops being valid (unix seconds; 0: unknown). */}}
{{- define "rampart.notAfter" -}}
{{- dig "metadata" "annotations" "rampart.io/not-after" "0" . -}}
{{- end -}}
