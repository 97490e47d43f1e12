"""What each method of benchmarks/learning.py trains, and the stages it plans for one seed: RL with an
estimator and a reward source, preference training, round-based methods (iterative DPO, rejection sampling),
conditional SFT and distillation, each from its shipped recipe."""

from __future__ import annotations

from dataclasses import dataclass, field

from alignflow.flows.conditional_sft import learned_prefix
from alignflow.tasks.orchestration.evaluate import evaluate_step
from alignflow.tasks.orchestration.pipeline import Output, Step
from alignflow.tasks.orchestration.recipes import load_recipe


@dataclass(frozen=True)
class Method:
    stage: str  # what trains (tasks.stage_spec.STAGES)
    role: str  # the recipe file: <role>.yaml
    settings: dict = field(default_factory=dict)
    reward: str = ""  # "rm": the reward model the benchmark trains first; "rule": the tiny world's verifiable
    # reward (data/tiny/reward_func.py: the answer is right or not), as the recipe names it; "": none (offline)


def _rl(estimator: str, reward: str) -> Method:
    # the rule runs from grpo.yaml (its remote_rm_url); the RM from ppo.yaml (normalize_reward, reward_pretrain)
    # every estimator keeps grpo.yaml's dynamic sampling: it filters prompts by their samples' scores, whatever
    # the estimator then makes of them
    settings: dict = {"advantage_estimator": estimator}
    if estimator == "gae" and reward == "rm":  # a critic beside the RM: they share a bundle (OpenRLHF's flag), so
        settings["colocate_critic_reward"] = True  # actor+ref, critic+RM fit a 2-CPU head as the others' groups do
    return Method("ppo", "grpo" if reward == "rule" else "ppo", settings, reward)


# agent RL: grpo.yaml's stage (group_norm, dynamic sampling on the episode's score, two passes) with the tiny
# world's multi-turn environment in place of the rule, as the sft-grpo/tiny-agent deployment runs it; the held-out
# evaluation is the same single-turn greedy answer as every row's (its first try)
AGENT_ENV = "data/tiny/agent_retry.py"
AGENT = Method(
    "ppo",
    "grpo",
    {"advantage_estimator": "group_norm", "agent_func_path": AGENT_ENV, "remote_rm_url": None},
    f"environment ({AGENT_ENV})",
)

# the same two, wasting less (issue "RL that never waits and wastes nothing"): dynamic sampling draws a prompt whose
# last groups taught nothing less often (--dynamic_filtering_recheck 0.25), the rule row in one pass over the
# prompts, the agent row's episodes in a pool that outlives the iteration (--async_train) and streamed
# (--agent_batch_linger_ms 50)
RECHECK = {"dynamic_filtering_recheck": 0.25}
GRPO_RULE_RECHECK = Method("ppo", "grpo", {"advantage_estimator": "group_norm", **RECHECK, "num_episodes": 1}, "rule")
AGENT_POOL = Method(
    "ppo",
    "grpo",
    {**AGENT.settings, **RECHECK, "async_train": True, "agent_batch_linger_ms": 50},
    AGENT.reward,
)

# agent RL with pictures: the tiny-vision recipe's grpo.yaml with an environment whose hint is a picture ("> 7") in
# place of the rule; an episode holds the prompt's picture and the hint's (max_images_per_prompt bounds both)
VISION_AGENT_ENV = "data/tiny_vision/agent_look_again.py"
VISION_AGENT = Method(
    "ppo",
    "grpo",
    {
        "advantage_estimator": "group_norm",
        "agent_func_path": VISION_AGENT_ENV,
        "remote_rm_url": None,
        "max_images_per_prompt": 2,
    },
    f"environment ({VISION_AGENT_ENV})",
)


@dataclass(frozen=True)
class Rounds:
    """A round-based method: each round generates with the current policy (`recipe`'s generate.yaml, scored by
    the rule) and trains the next policy on that data (its `<train>.yaml`), as the iterative-dpo and
    rejection-sampling flows do, without a gate; the last round's model is the method's."""

    train: str  # the training stage of a round: dpo (iterative DPO) or sft (rejection sampling)
    recipe: str  # the shipped recipe that configures a round
    rounds: int = 3
    reward: str = "rule"

    @property
    def stage(self) -> str:
        return self.train


@dataclass(frozen=True)
class Steered:
    """Conditional SFT (the conditional-sft flow's stages): the SFT start's own samples scored by the rule and
    prefixed with their score (`recipe`'s score.yaml), SFT on them (its sft.yaml), then the held-out evaluation
    asking for each score in `asked` (the first is the method's accuracy) and with no prefix at all."""

    recipe: str = "tiny-csft"
    asked: tuple[float, ...] = (1.0, 0.0)
    reward: str = "rule"
    stage: str = "sft"


@dataclass(frozen=True)
class Distilled:
    """Distillation (the distill flow's kd or opd stage, its tiny recipe file): the SFT start as the student,
    the `teacher` method's model of the same seed as the teacher (trained first if it is not committed)."""

    stage: str  # kd (on the SFT demonstrations) or opd (on the student's own samples)
    settings: dict = field(default_factory=dict)
    teacher: str = "grpo-rule"

    @property
    def reward(self) -> str:  # no reward: the teacher's next-token distributions are the signal
        return f"teacher ({self.teacher})"


ESTIMATORS = {
    "ppo": "gae",
    "reinforce++": "reinforce",
    "reinforce++-baseline": "reinforce_baseline",
    "rloo": "rloo",
    "grpo": "group_norm",
    "dr-grpo": "dr_grpo",
}
METHODS: dict[str, Method | Rounds | Steered | Distilled] = {
    **{f"{name}-{reward}": _rl(est, reward) for name, est in ESTIMATORS.items() for reward in ("rm", "rule")},
    "dpo": Method("dpo", "dpo"),
    "ipo": Method("dpo", "dpo", {"ipo": True}),
    "cdpo": Method("dpo", "dpo", {"label_smoothing": 0.1}),
    "kto": Method("kto", "kto"),
    "iterative-dpo": Rounds("dpo", "tiny-idpo"),
    "rejection-sampling": Rounds("sft", "tiny-rs"),
    "conditional-sft": Steered(),
    "kd": Distilled("kd"),
    # KD's baseline: the same stage, data and batches with kd_coef 0 (plain SFT on the demonstrations)
    "kd-coef-0": Distilled("kd", {"kd_coef": 0.0}),
    "opd": Distilled("opd"),
    "agent-grpo": AGENT,
    "agent-grpo-pictures": VISION_AGENT,
    "grpo-rule-recheck": GRPO_RULE_RECHECK,
    "agent-grpo-pool": AGENT_POOL,
}


def own_recipe(method: Method | Rounds | Steered | Distilled) -> str | None:
    """The recipe a method's data or environment belongs to (None: any): the tiny world's round recipes
    (tiny-idpo, tiny-rs, tiny-csft) and its agent (hints in the tiny chat format), the visual world's agent."""
    if isinstance(method, (Rounds, Steered)) or method in (AGENT, AGENT_POOL):
        return "tiny"
    return "tiny-vision" if method is VISION_AGENT else None


def round_steps(name: str, method: Rounds, sft: str, seed: int, budget: dict[str, dict]) -> list[Step]:
    """Round k generates with round k-1's model (the SFT start first) and trains the next from it; the last
    round's train step is `name`, the others `<name> round k`."""
    # a role may name another shipped recipe's file: relative to the benchmark's recipe folder (tiny)
    role = f"../{method.recipe}/"
    out: list[Step] = []
    policy: str | Output = sft
    for k in range(1, method.rounds + 1):
        gen, train = f"{name} generate {k}", (name if k == method.rounds else f"{name} round {k}")
        # the round seeds the sampling and (with the recipe's rollout_batch_size) picks its slice of the prompts
        generate = {**budget.get("batch_inference", {}), "seed": 100 * seed + k, "iter": k - 1}
        out += [
            Step(gen, "batch_inference", role + "generate", generate, {"pretrain": policy}),
            Step(
                train,
                method.train,
                role + method.train,
                {**budget.get(method.train, {}), "seed": seed},
                {"pretrain": policy, "dataset": Output(gen, "output.jsonl")},
            ),
        ]
        policy = Output(train)
    return out


def steered_steps(name: str, method: Steered, sft: str, seed: int, budget: dict[str, dict]) -> list[Step]:
    """Score, SFT (the step `name`), then `evaluate <name>` asking for the first score, `evaluate <name> asked
    <r>` for the others and `evaluate <name> unsteered` without the prefix; the prefix is the one SFT learned."""
    role = f"../{method.recipe}/"
    score = f"{name} score"
    scoring = {**budget.get("batch_inference", {}), "seed": seed}
    learned = learned_prefix(load_recipe(method.recipe), {**scoring, "pretrain": sft})
    ask = {**budget.get("evaluate", {}), "enable_csft": True, "csft_prompt": learned}
    first, *others = method.asked
    return [
        Step(score, "batch_inference", role + "score", scoring, {"pretrain": sft}),
        Step(
            name,
            "sft",
            role + "sft",
            {**budget.get("sft", {}), "seed": seed},
            {"pretrain": sft, "dataset": Output(score, "output.jsonl")},
        ),
        evaluate_step(name, Output(name), {**ask, "csft_reward": first}),
        *(evaluate_step(f"{name} asked {r}", Output(name), {**ask, "csft_reward": r}) for r in others),
        evaluate_step(f"{name} unsteered", Output(name), budget.get("evaluate")),
    ]


def method_steps(m: str, sft: str, seed: int, budget: dict[str, dict]) -> list[Step]:
    """Method `m`'s stages for one seed (the step `<m> seed <seed>` is its model) and their evaluation; a
    distilled method's teacher run comes first."""
    method, name = METHODS[m], f"{m} seed {seed}"
    if isinstance(method, Steered):
        return steered_steps(name, method, sft, seed, budget)
    if isinstance(method, Rounds):
        return [
            *round_steps(name, method, sft, seed, budget),
            evaluate_step(name, Output(name), budget.get("evaluate")),
        ]
    if isinstance(method, Distilled):
        settings = {**method.settings, **budget.get(method.stage, {}), "seed": seed}
        teacher = f"{method.teacher} seed {seed}"
        return [
            *method_steps(method.teacher, sft, seed, budget),
            Step(name, method.stage, method.stage, settings, {"pretrain": sft, "teacher_model": Output(teacher)}),
            evaluate_step(name, Output(name), budget.get("evaluate")),
        ]
    inputs: dict = {"pretrain": sft}
    settings = {**method.settings, **budget.get(method.stage, {}), "seed": seed}
    if method.reward == "rm":
        inputs["reward_pretrain"] = Output("rm")
    elif method.reward == "rule" and settings["advantage_estimator"] == "gae":
        inputs["critic_pretrain"] = sft  # GAE's critic needs a backbone: the SFT model, with a fresh head
    return [
        Step(name, method.stage, method.role, settings, inputs),
        evaluate_step(name, Output(name), budget.get("evaluate")),
    ]


def steps(sft: str, methods: list[str], seeds: list[int], budget: dict[str, dict]) -> list[Step]:
    """The SFT start's evaluation, the reward model (once, if a method reads it, a teacher's included), then
    per method and seed its stages and the evaluation of its model; a step two methods share (a teacher that is
    also measured) is planned once."""
    planned = [step for m in methods for seed in seeds for step in method_steps(m, sft, seed, budget)]
    out = [evaluate_step("sft", sft, budget.get("evaluate"))]
    if any(step.inputs.get("reward_pretrain") == Output("rm") for step in planned):
        out.append(Step("rm", "rm", "rm", dict(budget.get("rm", {})), {"pretrain": sft}))
    return out + list({step.name: step for step in planned}.values())
