"""One module per stage of the loop, in the order the loop runs."""

from .canary import canary_verdict
from .dataset import training_dataset
from .derivative import fast_candidate, fast_model
from .evals import eval_suite
from .evaluation import candidate_evaluation
from .feedback import feedback_batch, feedback_events
from .health import champion_health
from .judging import judge_agreement
from .practice import practice
from .promotion import champion
from .reward import reward_model
from .selection import challenger_selection
from .training import candidate_model

FEEDBACK = [feedback_batch, feedback_events]
CYCLE = [eval_suite, judge_agreement, practice, reward_model, training_dataset, candidate_model, challenger_selection,
         candidate_evaluation, champion]
DERIVATIVE = [fast_candidate, fast_model]
ALL = FEEDBACK + CYCLE + DERIVATIVE + [canary_verdict, champion_health]
