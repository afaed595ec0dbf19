#!/usr/bin/env python3
"""Writes mc.jsonl: 40 multiple-choice probes written for reprise (general
knowledge, everyday reasoning, language), scored by whether the right
choice is the likeliest continuation. Run from probes/."""
import json

Q = [
    ("What is the capital of France?", ["Paris", "Berlin", "Madrid", "Rome"], 0),
    ("How many legs does a spider have?", ["six", "eight", "ten", "four"], 1),
    ("Which planet is closest to the Sun?", ["Venus", "Earth", "Mercury", "Mars"], 2),
    ("What do bees make?", ["milk", "silk", "wool", "honey"], 3),
    ("Water freezes at what temperature in degrees Celsius?", ["zero", "ten", "fifty", "one hundred"], 0),
    ("Which animal is known as the king of the jungle?", ["the horse", "the lion", "the rabbit", "the owl"], 1),
    ("What color do you get when you mix blue and yellow?", ["red", "purple", "green", "orange"], 2),
    ("How many days are there in a week?", ["five", "six", "eight", "seven"], 3),
    ("Which is the largest ocean on Earth?", ["the Pacific", "the Atlantic", "the Indian", "the Arctic"], 0),
    ("What gas do plants take in from the air?", ["oxygen", "carbon dioxide", "helium", "neon"], 1),
    ("Which instrument has black and white keys?", ["the violin", "the drum", "the piano", "the flute"], 2),
    ("What is the opposite of hot?", ["warm", "bright", "loud", "cold"], 3),
    ("Which month comes after March?", ["April", "May", "February", "June"], 0),
    ("What do you use to cut paper?", ["a spoon", "scissors", "a pillow", "a cup"], 1),
    ("How many hours are in a day?", ["twelve", "sixty", "twenty-four", "one hundred"], 2),
    ("Which of these is a fruit?", ["a carrot", "a potato", "an onion", "an apple"], 3),
    ("What is the tallest animal?", ["the giraffe", "the elephant", "the horse", "the dog"], 0),
    ("Where do fish live?", ["in trees", "in water", "in the sand", "in the sky"], 1),
    ("Which shape has three sides?", ["a square", "a circle", "a triangle", "a hexagon"], 2),
    ("What do we call frozen water?", ["steam", "rain", "fog", "ice"], 3),
    ("Which language is spoken in Brazil?", ["Portuguese", "French", "German", "Japanese"], 0),
    ("What is the main ingredient of bread?", ["sugar", "flour", "salt", "butter"], 1),
    ("Which organ pumps blood through the body?", ["the lungs", "the liver", "the heart", "the skin"], 2),
    ("What does a thermometer measure?", ["weight", "distance", "time", "temperature"], 3),
    ("If today is Monday, what day is tomorrow?", ["Tuesday", "Sunday", "Friday", "Thursday"], 0),
    ("Which is heavier, a kilogram of iron or a gram of iron?", ["a gram of iron", "a kilogram of iron", "they weigh the same", "neither"], 1),
    ("What falls from clouds when it rains?", ["sand", "leaves", "water", "stones"], 2),
    ("Which of these animals can fly?", ["a cow", "a fish", "a snake", "a bird"], 3),
    ("What is ten minus three?", ["seven", "six", "eight", "thirteen"], 0),
    ("Which season comes after winter?", ["autumn", "spring", "summer", "winter again"], 1),
    ("What do cows drink?", ["milk", "coffee", "water", "oil"], 2),
    ("Which word rhymes with cat?", ["dog", "cup", "tree", "hat"], 3),
    ("Who wrote the play Romeo and Juliet?", ["William Shakespeare", "Charles Dickens", "Mark Twain", "Jane Austen"], 0),
    ("What is the plural of mouse?", ["mouses", "mice", "meese", "mouse"], 1),
    ("What is the boiling point of water at sea level in degrees Celsius?", ["fifty", "zero", "one hundred", "two hundred"], 2),
    ("Which continent is Egypt in?", ["Europe", "Asia", "South America", "Africa"], 3),
    ("How many sides does a square have?", ["four", "three", "five", "six"], 0),
    ("What is the Earth's natural satellite called?", ["the Sun", "the Moon", "Mars", "a comet"], 1),
    ("Which of these is used to write on a blackboard?", ["a fork", "a brush", "chalk", "a key"], 2),
    ("When it is dark and you want to see, you turn on", ["the radio", "the tap", "the oven", "the light"], 3),
]
assert len(Q) == 40
with open("mc.jsonl", "w") as f:
    for q, choices, k in Q:
        f.write(json.dumps({"prompt": f"Question: {q}\nAnswer:", "choices": [" " + c for c in choices],
                            "answer": k}) + "\n")
