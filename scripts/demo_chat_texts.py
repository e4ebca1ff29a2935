"""The hand-written chat rows of the ``demo`` prompt set (``scripts/make_demo_prompts.py`` builds the file):
single-turn questions, multi-turn conversations, and conversations with a system prompt."""

# (question, answer) pairs, written by hand.
CHAT = [
    ("What is the capital of France?", "Paris."),
    (
        "Give me three tips for sleeping better.",
        "Keep a fixed bedtime, avoid screens for an hour before bed, and keep the room cool and dark.",
    ),
    ("Translate 'good morning' into Spanish.", "Buenos días."),
    ("What does CPU stand for?", "Central processing unit."),
    (
        "Write a haiku about autumn.",
        "Red leaves drift and fall,\nthe cold wind hums through bare trees,\nsoup steams on the stove.",
    ),
    ("How many days are in a leap year?", "366."),
    (
        "Explain what a variable is in programming, in one sentence.",
        "A variable is a named place that holds a value your program can read and change.",
    ),
    ("Suggest a name for a grey cat.", "How about Pebble?"),
    ("What is the boiling point of water at sea level in Celsius?", "100 °C."),
    ("Who wrote 'Pride and Prejudice'?", "Jane Austen."),
    (
        "Is a tomato a fruit or a vegetable?",
        "Botanically it's a fruit; in the kitchen it's usually treated as a vegetable.",
    ),
    (
        "What's a good way to start learning to cook?",
        "Pick five simple dishes you like, and cook each one a few times until you don't need the recipe.",
    ),
    (
        "Summarize the plot of Cinderella in two sentences.",
        "A kind young woman mistreated by her stepfamily goes to a royal ball with help from her fairy godmother. "
        "She flees at midnight leaving a glass slipper, and the prince uses it to find and marry her.",
    ),
    (
        "What is photosynthesis?",
        "The process plants use to turn light, water and carbon dioxide into sugar and oxygen.",
    ),
    ("Name three primary colors.", "Red, blue and yellow."),
    (
        "How do I reverse a list in Python?",
        "Use my_list.reverse() to do it in place, or my_list[::-1] for a reversed copy.",
    ),
    ("What is the largest planet in our solar system?", "Jupiter."),
    ("Give me a synonym for 'happy'.", "Cheerful."),
    (
        "What's the difference between weather and climate?",
        "Weather is what the atmosphere does today; climate is the pattern over decades.",
    ),
    ("Recommend a board game for four players.", "Ticket to Ride is easy to learn and works well with four."),
    (
        "How long should I boil an egg for a soft yolk?",
        "About six minutes from boiling, then straight into cold water.",
    ),
    ("Write a one-line motivational quote.", "Small steps every day still add up to a long road."),
    ("What is the chemical symbol for gold?", "Au."),
    (
        "Why is the sky blue?",
        "Air scatters short blue wavelengths of sunlight much more than red ones, "
        "so blue light reaches us from every direction.",
    ),
    ("How do you say 'thank you' in Japanese?", "Arigatou (ありがとう)."),
    (
        "What is an API?",
        "An application programming interface: a defined way for one program to ask another for data or actions.",
    ),
    ("List the days of the week.", "Monday, Tuesday, Wednesday, Thursday, Friday, Saturday, Sunday."),
    ("What's a healthy snack I can make in five minutes?", "Apple slices with a spoon of peanut butter."),
    (
        "Explain gravity to a five-year-old.",
        "Gravity is an invisible pull that makes things fall down and keeps us on the ground.",
    ),
    ("Which ocean is the largest?", "The Pacific Ocean."),
    ("What does HTML stand for?", "HyperText Markup Language."),
    (
        "Give me an idea for a birthday present for my dad.",
        "A nice mug with a bag of good coffee from a local roaster.",
    ),
    ("How many continents are there?", "Seven."),
    ("What is the past tense of 'run'?", "Ran."),
    ("Can you recommend a classic science fiction novel?", "Try 'The Left Hand of Darkness' by Ursula K. Le Guin."),
    ("What is the freezing point of water in Fahrenheit?", "32 °F."),
    ("Write a short apology text for being late.", "Sorry I'm running late, I'll be there in ten minutes!"),
    ("What is a prime number?", "A whole number greater than 1 whose only divisors are 1 and itself."),
    (
        "How do I make my houseplants healthier?",
        "Water only when the top of the soil is dry, give them bright indirect light, "
        "and repot when roots crowd the pot.",
    ),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci."),
    ("What is the square root of 81?", "9."),
    ("Describe the color green without using the word 'green'.", "The color of fresh grass and new leaves in spring."),
    ("What is the speed of light?", "About 300,000 kilometres per second."),
    ("Give me a fun fact about octopuses.", "Octopuses have three hearts."),
    (
        "How can I be more productive in the morning?",
        "Decide the night before on the one task you'll do first, and do it before checking messages.",
    ),
    ("What is the main language spoken in Brazil?", "Portuguese."),
    ("What's the opposite of 'ancient'?", "Modern."),
    (
        "What is machine learning?",
        "Teaching computers to find patterns in data so they can make predictions without explicit rules.",
    ),
    ("Suggest a title for a blog post about hiking.", "Trail Notes: Finding Quiet on the Mountain."),
    ("What is H2O?", "Water: two hydrogen atoms and one oxygen atom."),
    ("Tell me a clean joke.", "Why don't skeletons fight each other? They don't have the guts."),
    ("What year did humans first land on the Moon?", "1969."),
    ("How do I center a div in CSS?", "Give the parent display: flex; justify-content: center; align-items: center;."),
    ("What are the three states of matter?", "Solid, liquid and gas."),
    ("What is a noun?", "A word for a person, place, thing or idea."),
    (
        "Give me a packing list for a weekend trip.",
        "Two outfits, sleepwear, toiletries, phone charger, a light jacket and a book.",
    ),
    ("What does DNA stand for?", "Deoxyribonucleic acid."),
    ("How many legs does a spider have?", "Eight."),
    (
        "Write a sentence using the word 'serendipity'.",
        "Finding my favourite café while lost in the rain was pure serendipity.",
    ),
    ("What's the tallest mountain on Earth?", "Mount Everest, at about 8,849 metres."),
]

# Multi-turn conversations: earlier turns are history; the last assistant turn is the original answer.
MULTI_TURN = [
    [
        "I'm planning a trip to Italy.",
        "Nice! Which cities are you thinking about?",
        "Rome and Florence. How many days should I spend in each?",
        "Three days in Rome and two in Florence is a comfortable start.",
    ],
    ["What is 12 times 12?", "144.", "And if I add 6?", "150."],
    [
        "Can you help me name my bakery?",
        "Of course. What kind of feel do you want?",
        "Cozy and a little old-fashioned.",
        "How about 'The Flour Jar'?",
    ],
    [
        "I want to learn a new language.",
        "Great idea. Do you have one in mind?",
        "Maybe German. Where do I start?",
        "Learn the 500 most common words and practise ten minutes a day with an app or a tutor.",
    ],
    [
        "What's a good beginner houseplant?",
        "A pothos is very forgiving.",
        "How often do I water it?",
        "About once a week, when the top few centimetres of soil are dry.",
    ],
    [
        "Tell me about the Eiffel Tower.",
        "It's an iron tower in Paris, finished in 1889.",
        "How tall is it?",
        "About 330 metres including its antennas.",
    ],
    [
        "I have chicken, rice and broccoli.",
        "That's a good base for dinner.",
        "What can I make in 30 minutes?",
        "A quick stir-fry: brown the chicken, add broccoli and soy sauce, and serve over the rice.",
    ],
    ["Which is bigger, a mile or a kilometre?", "A mile.", "By how much?", "A mile is about 1.61 kilometres."],
    ["Give me a word that rhymes with 'cat'.", "Hat.", "Another one?", "Mat."],
    [
        "I'm nervous about a job interview tomorrow.",
        "That's normal. What's the role?",
        "A junior data analyst.",
        "Prepare two stories about projects you're proud of, and review basic SQL; you'll do fine.",
    ],
    [
        "What is Python?",
        "A popular programming language.",
        "Is it good for beginners?",
        "Yes, its syntax is simple and readable, which makes it a common first language.",
    ],
    ["Recommend a movie for tonight.", "Do you prefer comedy or drama?", "Comedy.", "Try 'The Grand Budapest Hotel'."],
]

# Conversations with a system prompt (single or multi turn).
WITH_SYSTEM = [
    [
        "You are a concise assistant. Answer in one sentence.",
        "What is the sun?",
        "The Sun is the star at the centre of our solar system.",
    ],
    [
        "You are a friendly cooking assistant.",
        "How do I keep pasta from sticking?",
        "Use plenty of boiling salted water and stir during the first two minutes.",
    ],
    ["You are a helpful math tutor.", "What is 25 + 17?", "25 + 17 = 42."],
    ["You answer like a pirate.", "Where is the treasure?", "Arr, buried under the old palm on Skull Island, matey!"],
    [
        "You are a travel guide for Japan.",
        "When is cherry blossom season?",
        "Usually late March to early April in Tokyo and Kyoto.",
    ],
    [
        "You are a patient programming mentor.",
        "What is a for loop?",
        "It repeats a block of code once for each item in a sequence.",
        "Can you show one in Python?",
        "for name in ['Ann', 'Bo']:\n    print(name)",
    ],
    ["Always answer in French.", "How are you?", "Je vais bien, merci !"],
    [
        "You are a fitness coach.",
        "How many push-ups should a beginner do?",
        "Start with three sets of as many as you can with good form, and add one or two each week.",
    ],
]
