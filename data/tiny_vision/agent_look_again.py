"""A multi-turn environment of the tiny visual world that answers with a picture (--agent_func_path): a wrong
answer gets a picture of a hint, "> 7" (the sum is larger than 7) or "< 7", drawn like the sums, and one more
try. Reward 1 for a right answer at either try, 0 otherwise; the episode's score (for dynamic filtering) is the
same. Written to OpenRLHF's AgentInstance contract for vision-language models (`environment_images`, an
`<image>` placeholder where the picture goes in the feedback); the only alignflow-specific line is the import.

Two tries, not three: each picture is 64 of the tiny LLaVA's 256 positions.
"""

from PIL import Image, ImageDraw, ImageFont

from alignment.agents import AgentInstanceBase
from alignment.tiny_world.reward import extract_answer

TRIES = 2
SIZE, FONT = 56, 22  # the sums' canvas and font (alignment/tiny_world/vision.py)


def hint_picture(text: str) -> Image.Image:
    """`text` centred, black on white, no anti-aliasing: as the sums are drawn."""
    img = Image.new("RGB", (SIZE, SIZE), (255, 255, 255))
    draw = ImageDraw.Draw(img)
    draw.fontmode = "1"
    font = ImageFont.load_default(size=FONT)
    left, top, right, bottom = font.getbbox(text)
    draw.text(((SIZE - (right - left)) // 2 - left, (SIZE - (bottom - top)) // 2 - top), text, fill=0, font=font)
    return img


class AgentInstance(AgentInstanceBase):
    def __init__(self, *args, **kwargs):
        self.tries = 0

    async def reset(self, states, **kwargs):
        return {"observation": states["observation"]}

    async def step(self, states, **kwargs):
        self.tries += 1
        answer, label = extract_answer(states["action_text"]), int(states["label"])
        right = answer == label
        done = right or self.tries >= TRIES
        feedback, images = "", []
        if not done and answer is None:
            feedback = "\n<|user|>\nGive the answer as a number.<|end|>\n<|assistant|>\n"
        elif not done:
            feedback = "\n<|user|>\n<image>Try again.<|end|>\n<|assistant|>\n"
            images = [hint_picture(f"{'>' if label > answer else '<'} {answer}")]
        reward = 1.0 if right else 0.0
        return {
            "rewards": reward,
            "scores": reward,
            "environment_feedback": feedback,
            "environment_images": images,
            "done": done,
            "sampling_params": states.get("sampling_params"),
            "extra_logs": {"tries": float(self.tries), "first_try_right": float(right and self.tries == 1)},
        }
