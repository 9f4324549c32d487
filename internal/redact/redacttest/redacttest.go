// Package redacttest states, for tests, what a readable card number is,
// apart from internal/redact's own masking: the fuzz tests of every
// renderer check their outputs with it, so that one wrong statement is not
// checked by itself.
package redacttest

// CardLike finds a run of digits (single spaces or hyphens between
// groups) in which consecutive groups holding 13 to 19 digits pass Luhn,
// as redact masks them.
func CardLike(s string) (string, bool) {
	isD := func(i int) bool { return i >= 0 && i < len(s) && s[i] >= '0' && s[i] <= '9' }
	for i := 0; i < len(s); i++ {
		if !isD(i) || isD(i-1) {
			continue
		}
		var groups [][2]int
		j := i
		for {
			k := j
			for isD(k) {
				k++
			}
			groups = append(groups, [2]int{j, k})
			if (k < len(s) && (s[k] == ' ' || s[k] == '-')) && isD(k+1) {
				j = k + 1
				continue
			}
			j = k
			break
		}
		for a := range groups {
			digits := ""
			for z := a; z < len(groups); z++ {
				digits += s[groups[z][0]:groups[z][1]]
				if len(digits) > 19 {
					break
				}
				if len(digits) >= 13 && luhnOK(digits) {
					return s[groups[a][0]:groups[z][1]], true
				}
			}
		}
		i = j
	}
	return "", false
}

func luhnOK(d string) bool {
	sum := 0
	for i := len(d) - 1; i >= 0; i-- {
		v := int(d[i] - '0')
		if (len(d)-i)%2 == 0 {
			v *= 2
			if v > 9 {
				v -= 9
			}
		}
		sum += v
	}
	return sum%10 == 0
}
