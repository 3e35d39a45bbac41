"""HTTP messages: the request, the responses, headers, cookies, errors and the JSON codec."""
