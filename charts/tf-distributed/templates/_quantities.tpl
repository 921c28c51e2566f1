{{/*
Kubernetes quantities as validateValues compares and shows them.
*/}}

{{/*
A quantity as messages show it: strings as written, numbers as decimals (integers below 10^15 in
full, others as Go's %v writes a float), whether helm read them as float64 (files) or int64 (--set).
*/}}
{{- define "tf-distributed.quantityText" -}}
{{- if kindIs "string" . -}}
{{- . -}}
{{- else if and (lt (float64 .) 1e15) (eq (float64 .) (floor (float64 .))) -}}
{{- printf "%d" (int64 .) -}}
{{- else -}}
{{- printf "%v" (float64 .) -}}
{{- end -}}
{{- end -}}

{{/*
A Kubernetes quantity as the API server stores it, as a string that compares like the number:
<19-digit integer part>.<9-digit nano part>, rounded up to 1n and capped at 2^63-1 as
resource.ParseQuantity does. Exact (decimal digit strings; binary suffixes multiply by 1024).
Usage: include "tf-distributed.quantityKey" "1.5Gi"
*/}}
{{- define "tf-distributed.quantityKey" -}}
{{- $text := toString . -}}
{{- $pattern := `^\+?([0-9]*)(?:\.([0-9]*))?(Ki|Mi|Gi|Ti|Pi|Ei|m|k|M|G|T|P|E|[eE][-+]?[0-9]+)?$` -}}
{{- $whole := regexReplaceAll $pattern $text "${1}" -}}
{{- $fraction := regexReplaceAll $pattern $text "${2}" -}}
{{- $suffix := regexReplaceAll $pattern $text "${3}" -}}
{{- $digits := regexReplaceAll "^0+" (printf "%s%s" $whole $fraction) "" -}}
{{- $exponent := sub 0 (len $fraction) -}}
{{- $shift := 0 -}}
{{- $binary := dict "Ki" 1 "Mi" 2 "Gi" 3 "Ti" 4 "Pi" 5 "Ei" 6 -}}
{{- $decimal := dict "m" -3 "k" 3 "M" 6 "G" 9 "T" 12 "P" 15 "E" 18 -}}
{{- if hasKey $binary $suffix -}}
{{- $shift = index $binary $suffix | int -}}
{{- else if hasKey $decimal $suffix -}}
{{- $exponent = add $exponent (index $decimal $suffix) -}}
{{- else if $suffix -}}
{{- $written := trimPrefix "+" (substr 1 -1 $suffix) -}}
{{- $magnitude := regexReplaceAll "^0+" (trimPrefix "-" $written) "" -}}
{{- $power := ternary 10000 (atoi (default "0" $magnitude)) (gt (len $magnitude) 4) -}}
{{- $exponent = ternary (sub $exponent $power) (add $exponent $power) (hasPrefix "-" $written) -}}
{{- end -}}
{{- $exponent = max -10000 (min 10000 $exponent) -}}
{{- range until $shift -}}
{{- $carry := 0 -}}
{{- $product := "" -}}
{{- $characters := splitList "" $digits -}}
{{- range $i := until (len $characters) -}}
{{- $x := add (mul (atoi (index $characters (sub (sub (len $characters) 1) $i))) 1024) $carry -}}
{{- $product = printf "%d%s" (mod $x 10) $product -}}
{{- $carry = div $x 10 -}}
{{- end -}}
{{- if gt $carry 0 }}{{ $product = printf "%d%s" $carry $product }}{{ end -}}
{{- $digits = $product -}}
{{- end -}}
{{- $max := "9223372036854775807" -}}
{{- if not $digits -}}
{{- printf "%s.000000000" (repeat 19 "0") -}}
{{- else if gt (add (len $digits) $exponent) 19 -}}
{{- printf "%s.000000000" $max -}}
{{- else -}}
{{- /* $digits * 10^$exponent = <integer>.<fraction>; only 9 fraction digits are kept, any further non-zero digit rounds up */ -}}
{{- $nanos := "" -}}
{{- $roundUp := false -}}
{{- $scaled := add $exponent 9 -}}
{{- if ge $scaled 0 -}}
{{- $nanos = printf "%s%s" $digits (repeat (int $scaled) "0") -}}
{{- else if gt (len $digits) (sub 0 $scaled) -}}
{{- $nanos = substr 0 (int (add (len $digits) $scaled)) $digits -}}
{{- $roundUp = regexMatch "[1-9]" (substr (int (add (len $digits) $scaled)) -1 $digits) -}}
{{- else -}}
{{- $nanos = "0" -}}
{{- $roundUp = true -}}
{{- end -}}
{{- if $roundUp -}}
{{- $carry := 1 -}}
{{- $sum := "" -}}
{{- $characters := splitList "" $nanos -}}
{{- range $i := until (len $characters) -}}
{{- $x := add (atoi (index $characters (sub (sub (len $characters) 1) $i))) $carry -}}
{{- $sum = printf "%d%s" (mod $x 10) $sum -}}
{{- $carry = div $x 10 -}}
{{- end -}}
{{- if gt $carry 0 }}{{ $sum = printf "%d%s" $carry $sum }}{{ end -}}
{{- $nanos = $sum -}}
{{- end -}}
{{- $nanos = printf "%s%s" (repeat (int (max 0 (sub 28 (len $nanos)))) "0") $nanos -}}
{{- $integer := substr 0 19 $nanos -}}
{{- if or (gt (len $nanos) 28) (gt $integer $max) (and (eq $integer $max) (ne (substr 19 28 $nanos) "000000000")) -}}
{{- printf "%s.000000000" $max -}}
{{- else -}}
{{- printf "%s.%s" $integer (substr 19 28 $nanos) -}}
{{- end -}}
{{- end -}}
{{- end -}}
