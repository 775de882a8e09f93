"""A task the pipeline cannot check: questions about a shop's catalogue (prices, plans, shipping, returns) with
short free-text answers, the team's eval file its curators write, and the team's model that knows part of it.

The world holds the truth (facts.py) and the rule that grades an answer (questions.matches, which its judge runs);
the pipeline never imports this package, so it sees only users' questions and feedback, the eval file and the
judge's answers over HTTP, as a team with a production assistant would.
"""
