"""Users' words are personal data: redaction before anything is stored (redact.py), deletion of a user's feedback on
request and of old feedback by age (forget.py), everywhere the loop keeps it."""
